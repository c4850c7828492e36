"""What every endpoint shares: the ``Api`` (the engine and what the server was started
with), the bearer token, the body checks, and the refusals with their status:

    AuthenticationError                          401  no, unknown or revoked token
    PermissionDeniedError, ApprovalError
      (not_allowed: agent, role, scope, duty)    403
    TaskNotFoundError, no such run or hook       404
    ApprovalError (stale, expired, not_waiting),
      IllegalEventError, VersionConflictError,
      TaskStateError, KeyReusedError             409
    InputError, DefinitionError, a bad body      422
    StoreUnavailableError                        503  the database cannot be reached

Route lists mounted beside the API's (``app.ROUTE_FACTORIES``) build on these."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from statewright._errors import (
    ApprovalError,
    AuthenticationError,
    DefinitionError,
    IllegalEventError,
    InputError,
    KeyReusedError,
    PermissionDeniedError,
    Refusal,
    StaleLeaseError,
    StatewrightError,
    StoreUnavailableError,
    TaskNotFoundError,
    TaskStateError,
    VersionConflictError,
)
from statewright._json_limits import MAX_INPUT_BYTES, loads_json_object
from statewright.definition.model import Workflow
from statewright.runtime.engine import Engine
from statewright.runtime.users import Principal
from statewright.server.hooks import Hook
from statewright.server.openapi import BODIES

_VALIDATORS = {name: jsonschema.Draft202012Validator(schema) for name, schema in BODIES.items()}


class NotFoundError(StatewrightError, LookupError):
    """No loop run or hook of that name (tasks have TaskNotFoundError)."""


@dataclass
class Api:
    """What the endpoints share: the engine, the workflows POST /api/tasks may start, the
    hooks, and where the outer loop's runs are kept."""

    engine: Engine
    workflows: Mapping[str, Workflow] = field(default_factory=dict)
    hooks: Mapping[str, Hook] = field(default_factory=dict)
    loop_db: str | None = None

    def principal(self, request: Request) -> Principal:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if not header:
            raise AuthenticationError("this call needs 'Authorization: Bearer TOKEN' (from 'statewright users token')")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationError("the Authorization header must be 'Bearer TOKEN'")
        return self.engine.users.authenticate(token.strip())

    def acting(self, request: Request, body: Mapping[str, Any]) -> Principal:
        """The token's person, authenticated again by the engine; with ``as``, named so."""
        return self.engine.users.check(self.principal(request), as_name=body.get("as"), act="act")


# --- errors ---------------------------------------------------------------------------------


def _status(exc: StatewrightError) -> tuple[int, str]:
    if isinstance(exc, AuthenticationError):
        return 401, "unauthenticated"
    if isinstance(exc, PermissionDeniedError):
        return 403, "forbidden"
    if isinstance(exc, ApprovalError):
        return (403, "forbidden") if exc.refusal is Refusal.NOT_ALLOWED else (409, exc.refusal.value)
    if isinstance(exc, TaskNotFoundError | NotFoundError):
        return 404, "not_found"
    if isinstance(exc, KeyReusedError):
        return 409, "key_reused"
    if isinstance(exc, IllegalEventError | VersionConflictError | StaleLeaseError | TaskStateError):
        return 409, "conflict"
    if isinstance(exc, InputError | DefinitionError):
        return 422, "invalid"
    if isinstance(exc, StoreUnavailableError):
        return 503, "unavailable"
    return 500, "error"


def error_response(exc: StatewrightError) -> JSONResponse:
    status, code = _status(exc)
    text = str(exc) if not isinstance(exc, DefinitionError) else "; ".join(exc.problems)
    body: dict[str, Any] = {"error": " ".join(text.split()), "code": code}
    if isinstance(exc, KeyReusedError):
        body["task_id"] = exc.task_id
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body, status_code=status, headers=headers)


async def http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
    code = {404: "not_found", 405: "method_not_allowed"}.get(status, "error")
    return JSONResponse({"error": str(detail), "code": code}, status_code=status)


# --- request plumbing -------------------------------------------------------------------------

Handler = Callable[[Api, Request, dict[str, Any]], Response]


async def read_json(request: Request, body: str | None) -> dict[str, Any]:
    """The request's JSON object within statewright's bounds, checked against the named
    body schema of the OpenAPI document; InputError (422) otherwise."""
    raw = await request.body()
    if len(raw) > MAX_INPUT_BYTES:
        raise InputError(f"the body is {len(raw):,} bytes; the most is {MAX_INPUT_BYTES:,}")
    data = loads_json_object(raw or b"", "the request body")
    if body is not None:
        error = jsonschema.exceptions.best_match(_VALIDATORS[body].iter_errors(data))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "the body"
            raise InputError(f"{where}: {error.message}")
    return data


def endpoint(api: Api, handler: Handler, *, body: str | None = None) -> Callable[[Request], Awaitable[Response]]:
    """An async endpoint that reads and checks the body, then runs ``handler`` (which talks
    to the store) in the thread pool; a statewright error becomes its JSON refusal."""

    async def run(request: Request) -> Response:
        try:
            data = await read_json(request, body) if body is not None else {}
            return await run_in_threadpool(handler, api, request, data)
        except StatewrightError as exc:
            return error_response(exc)

    return run
