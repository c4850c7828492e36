"""The few GitHub REST calls statewright makes (labels, issues, comments, pulls), over httpx.

As in GitHub Actions, the base URL comes from ``GITHUB_API_URL`` (default: GitHub's public
API) and the token from ``GITHUB_TOKEN``: the worker's or the receiver's own environment,
never a step's. Failures are one ``GitHubError``; ``retryable`` says whether a later try
may succeed (a connection error, a 5xx, a rate limit)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx

from statewright._errors import StatewrightError

API_URL_ENV = "GITHUB_API_URL"
TOKEN_ENV = "GITHUB_TOKEN"
DEFAULT_API_URL = "https://api.github.com"
TIMEOUT_SECONDS = 10.0
PAGE = 100  # GitHub's largest page
MAX_PAGES = 10


class GitHubError(StatewrightError):
    """A GitHub REST call failed (``status`` 0: no answer)."""

    def __init__(self, msg: str, *, status: int = 0, retryable: bool = False) -> None:
        self.status = status
        self.retryable = retryable
        super().__init__(msg)


class GitHub:
    """A client for one API base URL and token. ``transport`` is for tests (httpx's
    MockTransport); the tests of this package talk to a local HTTP server instead."""

    def __init__(
        self, base_url: str | None = None, token: str | None = None, *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = (base_url or os.environ.get(API_URL_ENV) or DEFAULT_API_URL).rstrip("/")
        token = token if token is not None else os.environ.get(TOKEN_ENV, "")
        if not token:
            raise GitHubError(f"{TOKEN_ENV} is not set; the GitHub calls need a token", retryable=False)
        headers = {
            "Accept": "application/vnd.github+json", "Authorization": f"Bearer {token}",
            "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "statewright",
        }
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=TIMEOUT_SECONDS,
                                  transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> GitHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- labels ---------------------------------------------------------------------
    def labels_on(self, repo: str, number: int) -> list[str]:
        out: list[str] = []
        for page in range(1, MAX_PAGES + 1):
            got = self._call("GET", f"/repos/{repo}/issues/{number}/labels", params={"per_page": PAGE, "page": page})
            names = [str(item.get("name", "")) for item in got if isinstance(item, Mapping)]
            out.extend(names)
            if len(got) < PAGE:
                break
        return out

    def add_labels(self, repo: str, number: int, names: Sequence[str]) -> None:
        self._call("POST", f"/repos/{repo}/issues/{number}/labels", json={"labels": list(names)})

    def remove_label(self, repo: str, number: int, name: str) -> None:
        """Remove one label; one that is not there is already removed."""
        try:
            self._call("DELETE", f"/repos/{repo}/issues/{number}/labels/{quote(name, safe='')}")
        except GitHubError as exc:
            if exc.status != 404:
                raise

    def ensure_label(self, repo: str, name: str, color: str, description: str = "") -> str:
        """Create the repository's label, or update its color: "created" or "updated"."""
        body = {"name": name, "color": color, "description": description}
        try:
            self._call("POST", f"/repos/{repo}/labels", json=body)
            return "created"
        except GitHubError as exc:
            if exc.status != 422:  # 422: it exists already
                raise
        self._call("PATCH", f"/repos/{repo}/labels/{quote(name, safe='')}",
                   json={"color": color, "description": description})
        return "updated"

    # --- comments and pulls ---------------------------------------------------------
    def comment(self, repo: str, number: int, body: str) -> None:
        self._call("POST", f"/repos/{repo}/issues/{number}/comments", json={"body": body})

    def comments(self, repo: str, number: int) -> list[str]:
        out: list[str] = []
        for page in range(1, MAX_PAGES + 1):
            got = self._call("GET", f"/repos/{repo}/issues/{number}/comments", params={"per_page": PAGE, "page": page})
            out.extend(str(item.get("body", "")) for item in got if isinstance(item, Mapping))
            if len(got) < PAGE:
                break
        return out

    def reopen(self, repo: str, number: int) -> None:
        self._call("PATCH", f"/repos/{repo}/issues/{number}", json={"state": "open"})

    def pull(self, repo: str, number: int) -> Mapping[str, Any]:
        got = self._call("GET", f"/repos/{repo}/pulls/{number}")
        return got if isinstance(got, Mapping) else {}

    # --- the one seam ---------------------------------------------------------------
    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        what = f"GitHub {method} {path}"
        try:
            resp = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise GitHubError(f"{what}: no answer ({type(exc).__name__}: {exc})", retryable=True) from None
        if resp.status_code >= 400:
            limited = resp.status_code in (403, 429) and (
                resp.headers.get("x-ratelimit-remaining") == "0" or "retry-after" in resp.headers)
            retryable = resp.status_code >= 500 or resp.status_code == 429 or limited
            try:
                message = str(resp.json().get("message", ""))
            except ValueError:
                message = resp.text[:200]
            raise GitHubError(f"{what}: {resp.status_code} {message}".rstrip(), status=resp.status_code,
                              retryable=retryable)
        if resp.status_code == 204 or not resp.content:
            return None
        try:
            return resp.json()
        except ValueError:
            raise GitHubError(f"{what}: the answer is not JSON", status=resp.status_code) from None
