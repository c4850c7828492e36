"""Signing in to the web console: a token typed once into /login becomes a session cookie.

    POST /login  token=swt_...  -> engine.users.authenticate(token) -> a session id (random)
                                -> Set-Cookie: statewright_session=ID; HttpOnly; SameSite=Strict;
                                   Path=/; Secure when the request came over TLS

The server keeps each session's token in memory (never in the cookie), and authenticates it
again on every request, so a revoked token or a removed person is signed out at once. Every
session has its own CSRF token; every form carries it as the hidden field ``csrf_token`` and
a post without the right one is refused (403). The login form has its own CSRF token, set as
a short-lived cookie beside the form (double submit), so a page elsewhere cannot sign a
browser in as someone else."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from statewright._errors import AuthenticationError
from statewright.runtime.clock import Clock
from statewright.runtime.users import Principal, Users

SESSION_COOKIE = "statewright_session"
LOGIN_COOKIE = "statewright_login"
CSRF_FIELD = "csrf_token"
IDLE_SECONDS = 12 * 3600  # a session unused this long is signed out
MAX_SESSIONS = 10_000  # past this, the least recently used session is dropped


@dataclass
class Session:
    token: str
    csrf: str
    last_seen_ms: int


def _key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def secure(request: Request) -> bool:
    """Whether the browser reached us over TLS (then cookies are marked Secure)."""
    return request.url.scheme == "https"


def same(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


class Sessions:
    """The signed-in browsers of one server process."""

    def __init__(self, users: Users, clock: Clock) -> None:
        self.users = users
        self.clock = clock
        self._by_key: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, token: str) -> tuple[str, Session]:
        """A new session for ``token`` (AuthenticationError when it is not a valid token)."""
        self.users.authenticate(token)
        session_id = secrets.token_urlsafe(32)
        session = Session(token, secrets.token_urlsafe(32), self.clock.now_ms())
        with self._lock:
            if len(self._by_key) >= MAX_SESSIONS:
                oldest = min(self._by_key, key=lambda k: self._by_key[k].last_seen_ms)
                del self._by_key[oldest]
            self._by_key[_key(session_id)] = session
        return session_id, session

    def close(self, request: Request) -> None:
        session_id = request.cookies.get(SESSION_COOKIE)
        if session_id:
            with self._lock:
                self._by_key.pop(_key(session_id), None)

    def current(self, request: Request) -> tuple[Session, Principal] | None:
        """The request's session and its person, authenticated again now; None when the
        browser is not signed in (no cookie, an unknown or idle session, a revoked token)."""
        session_id = request.cookies.get(SESSION_COOKIE)
        if not session_id:
            return None
        now = self.clock.now_ms()
        key = _key(session_id)
        with self._lock:
            session = self._by_key.get(key)
            if session is None:
                return None
            if now - session.last_seen_ms > IDLE_SECONDS * 1000:
                del self._by_key[key]
                return None
            session.last_seen_ms = now
        try:
            who = self.users.authenticate(session.token)
        except AuthenticationError:  # revoked, or the person removed: signed out
            with self._lock:
                self._by_key.pop(key, None)
            return None
        return session, who


def set_session_cookie(response: Response, request: Request, session_id: str) -> None:
    response.set_cookie(SESSION_COOKIE, session_id, httponly=True, samesite="strict", secure=secure(request),
                        path="/")


def clear_session_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict", secure=secure(request))


def login_csrf(request: Request) -> str:
    """The login form's CSRF token: the browser's own, or a new one (``keep_login_csrf``
    then sets it as a cookie on the response)."""
    value = request.cookies.get(LOGIN_COOKIE)
    if value and 20 <= len(value) <= 100:
        return value
    return secrets.token_urlsafe(32)


def keep_login_csrf(request: Request, response: Response, value: str) -> None:
    if request.cookies.get(LOGIN_COOKIE) != value:
        response.set_cookie(LOGIN_COOKIE, value, max_age=3600, httponly=True, samesite="strict",
                            secure=secure(request), path="/login")
