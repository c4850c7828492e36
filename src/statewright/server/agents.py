"""HTTP routes for remote agents (``runtime/remote.py`` is the cycle they serve):

    POST /api/agents/{queue}/claim?wait=SECONDS   200 the work and its task token, or 204
                                                  after ``wait`` (long poll, capped) with none
    POST /api/agents/heartbeat  {"token"}         200 {"deadline_at_ms"}
    POST /api/agents/report     {"token", "verdict"?} or {"token", "error", "detail"?}, "note"?
                                                  200 {"task_id", "status", "repair", "reason"}

Every call carries ``Authorization: Bearer TOKEN``, a user token of an agent identity (role
``agent`` or ``agent:queue=NAME``). 401: no token, or one unknown or revoked; 403: not an
agent for the queue, or not the agent that claimed the attempt; 409: the task token is not
open (reported, late, unknown), nothing changed; 422: a malformed request. The engine is
called from a thread (its store calls block)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from statewright._errors import (
    AuthenticationError,
    InputError,
    PermissionDeniedError,
    StatewrightError,
    StoreError,
    TaskTokenError,
)
from statewright._json_limits import loads_json_object
from statewright.runtime.engine import Engine
from statewright.runtime.remote import RemoteAgents
from statewright.runtime.users import Principal

MAX_WAIT_SECONDS = 30.0  # the longest a claim is held open
POLL_SECONDS = 0.25  # how often a held claim looks at its queue again
MAX_BODY_BYTES = 2_000_000  # a report: a verdict (at most 1 MB as JSON) and its texts
_REPORT_KEYS = frozenset({"token", "verdict", "error", "detail", "note"})

Authenticate = Callable[[str], Principal]
Handler = Callable[[Request], Awaitable[Response]]


def agent_routes(
    engine: Engine, *, authenticate: Authenticate | None = None, max_wait_seconds: float = MAX_WAIT_SECONDS,
    poll_seconds: float = POLL_SECONDS,
) -> list[Route]:
    """The remote-agent routes over ``engine``. ``authenticate`` turns a bearer token into a
    Principal (default: the store's people, ``engine.users.authenticate``)."""
    auth = authenticate or engine.users.authenticate
    remote = RemoteAgents(engine)

    async def claim(request: Request, who: Principal) -> Response:
        queue = str(request.path_params["queue"])
        wait = _wait_seconds(request.query_params.get("wait", "0"), max_wait_seconds)
        deadline = time.monotonic() + wait
        while True:
            work = await run_in_threadpool(remote.claim, queue, who)
            if work is not None:
                return JSONResponse(work.to_dict())
            left = deadline - time.monotonic()
            if left <= 0:
                return Response(status_code=204)
            await asyncio.sleep(min(poll_seconds, left))

    async def heartbeat(request: Request, who: Principal) -> Response:
        body = await _body(request, frozenset({"token"}))
        due = await run_in_threadpool(remote.heartbeat, body.get("token"), who)
        return JSONResponse({"deadline_at_ms": due})

    async def report(request: Request, who: Principal) -> Response:
        body = await _body(request, _REPORT_KEYS)
        verdict, error = body.get("verdict"), body.get("error")
        if verdict is not None and error is not None:
            raise InputError("a report gives a 'verdict' (a JSON object) or an 'error' (a reason code), not both")
        if error is not None and not isinstance(error, str):
            raise InputError(f"'error' must be a reason code, got {type(error).__name__}")
        if not isinstance(verdict, Mapping | None):
            raise InputError(f"'verdict' must be a JSON object, got {type(verdict).__name__}")
        out = await run_in_threadpool(
            lambda: remote.report(body.get("token"), who, verdict=verdict, error=error,
                                  detail=body.get("detail", ""), note=body.get("note", "")),
        )
        return JSONResponse(out.to_dict())

    def guarded(act: Callable[[Request, Principal], Awaitable[Response]]) -> Handler:
        async def endpoint(request: Request) -> Response:
            try:
                who = await run_in_threadpool(auth, _bearer(request))
                return await act(request, who)
            except AuthenticationError as exc:
                return _error(401, exc, {"WWW-Authenticate": "Bearer"})
            except PermissionDeniedError as exc:
                return _error(403, exc)
            except TaskTokenError as exc:
                return _error(409, exc)
            except InputError as exc:
                return _error(422, exc)
            except StoreError as exc:
                return _error(503, exc)
            except StatewrightError as exc:  # the task moved on under the report: nothing changed
                return _error(409, exc)

        return endpoint

    return [
        Route("/api/agents/{queue}/claim", guarded(claim), methods=["POST"]),
        Route("/api/agents/heartbeat", guarded(heartbeat), methods=["POST"]),
        Route("/api/agents/report", guarded(report), methods=["POST"]),
    ]


def _bearer(request: Request) -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError("this call needs 'Authorization: Bearer TOKEN' (an agent identity's token)")
    return token.strip()


def _wait_seconds(raw: str, cap: float) -> float:
    try:
        wait = float(raw)
    except ValueError:
        raise InputError(f"wait must be a number of seconds, got {raw[:40]!r}") from None
    if not 0 <= wait <= 3600:  # NaN fails this too
        raise InputError(f"wait must be 0 to 3600 seconds, got {raw[:40]!r}")
    return min(wait, cap)


async def _body(request: Request, allowed: frozenset[str]) -> dict[str, Any]:
    data = b""
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_BODY_BYTES:
            raise InputError(f"the request body is over {MAX_BODY_BYTES:,} bytes")
    body = loads_json_object(data, "the request body", max_bytes=MAX_BODY_BYTES)
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise InputError(f"unknown field(s) {', '.join(unknown)[:200]}; allowed: {', '.join(sorted(allowed))}")
    for key in ("detail", "note"):
        if key in body and not isinstance(body[key], str):
            raise InputError(f"'{key}' must be text")
    return body


_CODES = {401: "unauthenticated", 403: "forbidden", 409: "conflict", 422: "invalid", 503: "unavailable"}


def _error(status: int, exc: Exception, headers: dict[str, str] | None = None) -> JSONResponse:
    """The API's refusal body: the one line, and the kind of refusal."""
    return JSONResponse({"error": " ".join(str(exc).split()), "code": _CODES[status]}, status_code=status,
                        headers=headers)
