"""Workflows, sign-in and form helpers for the web console's tests."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import httpx2 as httpx
from starlette.testclient import TestClient

from statewright.definition.loader import workflow_from_dict
from statewright.definition.model import Workflow

_VERDICT = {"type": "object", "properties": {"approved": {"type": "boolean"}, "summary": {"type": "string"},
                                             "findings": {"type": "array", "items": {"type": "string"}}},
            "required": ["approved"], "additionalProperties": False}


def console_workflows() -> dict[str, Workflow]:
    """hostile: an ai step whose verdict and note carry XSS payloads, then an approval.
    looping: an ai step and a check that never passes, looping back 20 times, then halting.
    polling: a wait step whose check never passes, 500 checks (1,000 events and more)."""
    hostile = workflow_from_dict({"workflow": "hostile", "steps": [
        {"id": "draft", "kind": "ai", "owner": "bots", "output_schema": _VERDICT,
         "agent": {"type": "python", "callable": "server.console_agents:hostile_agent"}},
        {"id": "approve", "kind": "human", "owner": "leads", "approvers": {"role": "maintainer"}},
    ]}, "<hostile>")
    looping = workflow_from_dict({"workflow": "looping", "steps": [
        {"id": "work", "kind": "ai", "owner": "bots", "output_schema": _VERDICT,
         "agent": {"type": "python", "callable": "server.console_agents:eager_agent"}},
        {"id": "check", "kind": "code", "owner": "ci", "run": {"callable": "server.console_agents:never_passes"},
         "on_failure": {"loop_back": "work", "max_attempts": 20}},
    ]}, "<looping>")
    polling = workflow_from_dict({"workflow": "polling", "steps": [
        {"id": "poll", "kind": "wait", "owner": "ops", "check": {"callable": "server.console_agents:not_yet"},
         "every": "1s", "max_checks": 500},
    ]}, "<polling>")
    return {"hostile": hostile, "looping": looping, "polling": polling}


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    if found is None:
        raise AssertionError("the page has no csrf_token field")
    return found.group(1)


def sign_in(client: TestClient, token: str, next_path: str = "/") -> httpx.Response:
    """Sign ``client`` in through the login form; the answer to the form's post."""
    form = client.get("/login")
    return client.post("/login", data={"token": token, "csrf_token": csrf_of(form.text), "next": next_path},
                       follow_redirects=False)


def post_form(client: TestClient, path: str, fields: dict[str, Any], *, csrf_from: str | None = None
              ) -> httpx.Response:
    """Post a form the way the page at ``csrf_from`` (default: the dashboard) would."""
    page = client.get(csrf_from or "/")
    return client.post(path, data={"csrf_token": csrf_of(page.text), **fields}, follow_redirects=False)


class _Parts(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


#: The elements the console's own templates use; anything else on a page came from data.
OWN_TAGS = frozenset({
    "html", "head", "meta", "title", "link", "script", "body", "a", "header", "nav", "form", "input", "span",
    "button", "main", "p", "h1", "h2", "h3", "section", "ul", "ol", "li", "strong", "small", "code", "pre", "div",
    "table", "thead", "tbody", "tr", "th", "td", "figure", "figcaption", "details", "summary", "dl", "dt", "dd",
    "label", "select", "option", "textarea", "progress", "svg", "defs", "marker", "path", "circle", "line",
    "rect", "text", "g"})


def markup_and_text(page: str) -> tuple[list[tuple[str, dict[str, str | None]]], str]:
    """The page's elements (tag, attributes) and its text, as a browser would read them."""
    parts = _Parts()
    parts.feed(page)
    return parts.tags, " ".join(parts.text)


def injected(page: str) -> list[str]:
    """What on the page is markup that the console's templates do not make: a foreign
    element, an event handler attribute, a script other than the console's, a javascript: URL."""
    found: list[str] = []
    tags, _ = markup_and_text(page)
    for tag, attrs in tags:
        if tag not in OWN_TAGS:
            found.append(f"<{tag}>")
        found += [f"<{tag} {k}=...>" for k in attrs if k.startswith("on")]
        if tag == "script" and not (attrs.get("src") or "").startswith("/console/console.js"):
            found.append(f"<script {attrs}>")
        found += [f"<{tag} {k}={v}>" for k, v in attrs.items() if v and v.strip().lower().startswith("javascript:")]
    return found
