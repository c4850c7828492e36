"""Webhook payloads in the shape of GitHub's documented examples (written for these tests,
with only the fields a receiver reads plus a few of the usual others), and deliveries:
headers signed the way GitHub signs them."""

from __future__ import annotations

import json
import uuid
from typing import Any

from statewright.integrations.github.webhook import sign

from .support import REPO

SECRET = "it-is-a-secret-to-everybody"


def _repository(repo: str) -> dict[str, Any]:
    owner, name = repo.split("/")
    return {"id": 1296269, "name": name, "full_name": repo, "private": False,
            "owner": {"login": owner, "id": 1, "type": "Organization"},
            "html_url": f"https://github.com/{repo}", "default_branch": "main"}


def _user(login: str, kind: str = "User") -> dict[str, Any]:
    return {"login": login, "id": abs(hash(login)) % 10**7, "type": kind,
            "html_url": f"https://github.com/{login}"}


def issue_opened(number: int, *, body: str = "Add a --dry-run flag", repo: str = REPO) -> dict[str, Any]:
    return {
        "action": "opened",
        "issue": {"number": number, "title": f"Issue {number}", "body": body, "state": "open",
                  "user": _user("carol"), "labels": [], "html_url": f"https://github.com/{repo}/issues/{number}"},
        "repository": _repository(repo), "sender": _user("carol"),
    }


def pull_request_opened(number: int, *, repo: str = REPO) -> dict[str, Any]:
    return {
        "action": "opened", "number": number,
        "pull_request": {"number": number, "title": f"PR {number}", "body": "Closes nothing yet", "state": "open",
                         "user": _user("dave"), "labels": [], "draft": False,
                         "head": {"ref": "feature", "sha": "a" * 40}, "base": {"ref": "main", "sha": "b" * 40}},
        "repository": _repository(repo), "sender": _user("dave"),
    }


def labeled(number: int, label: str, by: str, *, kind: str = "User", item: str = "issue",
            repo: str = REPO) -> dict[str, Any]:
    thing = {"number": number, "title": f"Issue {number}", "state": "open", "user": _user("carol"),
             "labels": [{"name": label, "color": "ededed"}]}
    return {"action": "labeled", item: thing, "label": {"id": 208045946, "name": label, "color": "ededed"},
            "repository": _repository(repo), "sender": _user(by, kind)}


def unlabeled(number: int, label: str, by: str, *, item: str = "pull_request", repo: str = REPO) -> dict[str, Any]:
    return {**labeled(number, label, by, item=item, repo=repo), "action": "unlabeled"}


def closed(number: int, by: str, *, item: str = "pull_request", merged: bool = False,
           repo: str = REPO) -> dict[str, Any]:
    thing: dict[str, Any] = {"number": number, "title": f"PR {number}", "state": "closed", "user": _user("dave"),
                             "labels": []}
    if item == "pull_request":
        thing.update(merged=merged, merged_by=_user(by) if merged else None,
                     merge_commit_sha="d" * 40 if merged else None)
    return {"action": "closed", item: thing, "repository": _repository(repo), "sender": _user(by)}


def check_suite_completed(numbers: list[int], *, conclusion: str = "success", repo: str = REPO) -> dict[str, Any]:
    return {
        "action": "completed",
        "check_suite": {"id": 118578147, "head_branch": "feature", "head_sha": "c" * 40, "status": "completed",
                        "conclusion": conclusion,
                        "pull_requests": [{"number": n, "head": {"ref": "feature"}, "base": {"ref": "main"}}
                                          for n in numbers]},
        "repository": _repository(repo), "sender": _user("github-actions[bot]", "Bot"),
    }


def review_submitted(number: int, *, state: str = "approved", repo: str = REPO) -> dict[str, Any]:
    return {
        "action": "submitted",
        "review": {"id": 80, "user": _user("erin"), "body": "Looks good", "state": state},
        "pull_request": {"number": number, "title": f"PR {number}", "state": "open"},
        "repository": _repository(repo), "sender": _user("erin"),
    }


def delivery(event: str, payload: Any, *, delivery_id: str | None = None, secret: str = SECRET,
             raw: bytes | None = None) -> tuple[dict[str, str], bytes]:
    """Headers and body as GitHub would POST them."""
    body = raw if raw is not None else json.dumps(payload).encode()
    return {
        "X-GitHub-Event": event, "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(secret, body), "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/044aadd",
    }, body
