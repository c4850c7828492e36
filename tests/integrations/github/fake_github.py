"""A fake of the GitHub REST endpoints statewright calls, as a real local HTTP server:
repository labels, an issue's labels, its comments, its state (open or closed), and pull
requests. Every call is
recorded (method, path, JSON body); ``fail(n, status)`` answers the next n calls with
``status`` to show retries."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

TOKEN = "ghs_fake_token_for_tests"
_ISSUE = re.compile(r"/repos/([^/]+/[^/]+)/issues/(\d+)/(labels|comments)(?:/(.+))?")
_REPO_LABELS = re.compile(r"/repos/([^/]+/[^/]+)/labels(?:/(.+))?")
_PULL = re.compile(r"/repos/([^/]+/[^/]+)/pulls/(\d+)")
_ISSUE_ITSELF = re.compile(r"/repos/([^/]+/[^/]+)/issues/(\d+)")


@dataclass
class Call:
    method: str
    path: str
    body: Any = None


@dataclass
class FakeGitHub:
    url: str = ""
    repo_labels: dict[str, dict[str, str]] = field(default_factory=dict)  # repo -> name -> color
    issue_labels: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    comments: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    pulls: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    closed: set[tuple[str, int]] = field(default_factory=set)  # issues and pull requests closed
    calls: list[Call] = field(default_factory=list)
    failures: list[int] = field(default_factory=list)  # statuses to answer the next calls with
    lock: threading.Lock = field(default_factory=threading.Lock)

    def labels(self, repo: str, number: int) -> set[str]:
        with self.lock:
            return set(self.issue_labels.get((repo, number), []))

    def comments_on(self, repo: str, number: int) -> list[str]:
        with self.lock:
            return list(self.comments.get((repo, number), []))

    def label_by_hand(self, repo: str, number: int, name: str) -> None:
        with self.lock:
            self.issue_labels.setdefault((repo, number), []).append(name)

    def fail(self, n: int, status: int = 502) -> None:
        with self.lock:
            self.failures.extend([status] * n)

    def writes(self) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method != "GET"]

    # --- the server side --------------------------------------------------------------
    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        with self.lock:
            self.calls.append(Call(method, path, body))
            if self.failures:
                return self.failures.pop(0), {"message": "Server Error"}
            m = _ISSUE.fullmatch(path)
            if m:
                repo, number, what, rest = m.group(1), int(m.group(2)), m.group(3), m.group(4)
                return self._issue(method, repo, number, what, unquote(rest) if rest else None, body)
            m = _REPO_LABELS.fullmatch(path)
            if m:
                return self._repo_label(method, m.group(1), unquote(m.group(2)) if m.group(2) else None, body)
            m = _ISSUE_ITSELF.fullmatch(path)
            if m and method == "PATCH" and isinstance(body, dict) and body.get("state") in ("open", "closed"):
                key = (m.group(1), int(m.group(2)))
                (self.closed.add if body["state"] == "closed" else self.closed.discard)(key)
                return 200, {"number": key[1], "state": body["state"]}
            m = _PULL.fullmatch(path)
            if m and method == "GET":
                pull = self.pulls.get((m.group(1), int(m.group(2))))
                return (200, pull) if pull is not None else (404, {"message": "Not Found"})
            return 404, {"message": "Not Found"}

    def _issue(self, method: str, repo: str, number: int, what: str, name: str | None, body: Any) -> tuple[int, Any]:
        if what == "comments":
            notes = self.comments.setdefault((repo, number), [])
            if method == "GET":
                return 200, [{"id": i + 1, "body": b} for i, b in enumerate(notes)]
            if method == "POST" and isinstance(body, dict) and isinstance(body.get("body"), str):
                notes.append(body["body"])
                return 201, {"id": len(notes), "body": body["body"]}
            return 422, {"message": "Validation Failed"}
        have = self.issue_labels.setdefault((repo, number), [])
        if method == "GET" and name is None:
            return 200, [{"name": n, "color": self.repo_labels.get(repo, {}).get(n, "ededed")} for n in have]
        if method == "POST" and name is None and isinstance(body, dict) and isinstance(body.get("labels"), list):
            for n in body["labels"]:
                self.repo_labels.setdefault(repo, {}).setdefault(n, "ededed")
                if n not in have:
                    have.append(n)
            return 200, [{"name": n} for n in have]
        if method == "DELETE" and name is not None:
            if name not in have:
                return 404, {"message": "Label does not exist"}
            have.remove(name)
            return 200, [{"name": n} for n in have]
        return 422, {"message": "Validation Failed"}

    def _repo_label(self, method: str, repo: str, name: str | None, body: Any) -> tuple[int, Any]:
        known = self.repo_labels.setdefault(repo, {})
        if method == "POST" and name is None and isinstance(body, dict):
            if body.get("name") in known:
                return 422, {"message": "Validation Failed", "errors": [{"code": "already_exists"}]}
            known[str(body["name"])] = str(body.get("color", "ededed"))
            return 201, body
        if method == "PATCH" and name is not None and name in known and isinstance(body, dict):
            known[name] = str(body.get("color", known[name]))
            return 200, {"name": name, "color": known[name]}
        return 404, {"message": "Not Found"}


def _handler(fake: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                status, answer = 401, {"message": "Bad credentials"}
            else:
                status, answer = fake.answer(self.command, urlsplit(self.path).path, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serve() -> Iterator[FakeGitHub]:
    fake = FakeGitHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
