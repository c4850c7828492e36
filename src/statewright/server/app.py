"""The HTTP API: the engine's reads and acts over HTTP, each act the engine's own.

    request -> bearer token -> engine.users.authenticate -> Principal
            -> the engine's act (approve, reject, retry, cancel, submit) or a read
            -> JSON; a refusal -> one line, its status from the error's kind (server/http.py)

The server decides nothing about who may act: it passes the token's Principal to the engine
and maps the engine's answer. Engine calls run in Starlette's thread pool (the stores are
safe to share between threads)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from statewright._errors import InputError, StatewrightError
from statewright._json_limits import MAX_INPUT_BYTES, loads_json_object
from statewright.definition.model import Workflow
from statewright.machine.state import TaskStatus
from statewright.runtime.engine import Engine
from statewright.runtime.fleet import waiting_reasons, with_waiting
from statewright.runtime.history import history_lines, summary, task_row
from statewright.runtime.users import Principal
from statewright.server import metrics as metrics_text
from statewright.server.hooks import DELIVERY_HEADER, SIGNATURE_HEADER, Hook
from statewright.server.http import Api, Handler, NotFoundError, endpoint, error_response, http_error
from statewright.server.openapi import spec


def _agent_routes(api: Api) -> Sequence[BaseRoute]:
    """The remote agents' claim, heartbeat and report (server/agents.py)."""
    from statewright.server.agents import agent_routes

    return agent_routes(api.engine, authenticate=api.engine.users.authenticate)


def _console_routes(api: Api) -> Sequence[BaseRoute]:
    """The web console's pages, form posts and live updates (server/console/)."""
    from statewright.server.console import console_routes

    return console_routes(api)

if TYPE_CHECKING:
    from statewright.integrations.github.webhook import WebhookConfig

#: Route lists mounted beside the API's own: each is called with the app's ``Api`` (the
#: engine, the bearer check, ``endpoint`` and the refusals are in server/http.py) and returns
#: Starlette routes.
ROUTE_FACTORIES: tuple[Callable[[Api], Sequence[BaseRoute]], ...] = (_agent_routes, _console_routes)

_DEFAULT_LIMIT = 100


def _int_param(request: Request, name: str, default: int | None, low: int, high: int) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InputError(f"query parameter {name} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise InputError(f"query parameter {name} must be from {low} to {high}, got {value}")
    return value


def _bool_param(request: Request, name: str) -> bool:
    raw = request.query_params.get(name)
    if raw is None or raw.lower() in ("false", "0", ""):
        return False
    if raw.lower() in ("true", "1"):
        return True
    raise InputError(f"query parameter {name} must be true or false, got {raw!r}")


# --- tasks ------------------------------------------------------------------------------------


def _waiting_for(api: Api, who: Principal, rows: Sequence[Any]) -> list[Any]:
    states = api.engine.states([r.task_id for r in rows])
    return [r for r in rows if r.task_id in states and api.engine.may_approve(states[r.task_id], who)]


def list_tasks(api: Api, request: Request, _: dict[str, Any]) -> Response:
    who = api.principal(request)
    status = request.query_params.get("status")
    if status is not None and status not in {s.value for s in TaskStatus}:
        raise InputError(f"unknown status {status!r}; use one of {', '.join(s.value for s in TaskStatus)}")
    limit = _int_param(request, "limit", _DEFAULT_LIMIT, 1, 1000) or _DEFAULT_LIMIT
    min_age = _int_param(request, "min_age_seconds", None, 0, 10**10)
    max_age = _int_param(request, "max_age_seconds", None, 0, 10**10)
    mine = _bool_param(request, "waiting_for_me")
    if mine and status not in (None, TaskStatus.AWAITING_APPROVAL.value):
        raise InputError("waiting_for_me lists tasks awaiting approval; leave out status or give that one")
    rows = api.engine.store.list_tasks(
        status=TaskStatus.AWAITING_APPROVAL.value if mine else status,
        workflow=request.query_params.get("workflow") or None, limit=1000 if (min_age or max_age or mine) else limit,
    )
    now = api.engine.clock.now_ms()
    if min_age is not None:
        rows = [r for r in rows if now - r.updated_at_ms >= min_age * 1000]
    if max_age is not None:
        rows = [r for r in rows if now - r.updated_at_ms <= max_age * 1000]
    if mine:
        rows = _waiting_for(api, who, rows)
    return JSONResponse({"tasks": with_waiting([task_row(r) for r in rows[:limit]], api.engine.store, now)})


def submit(api: Api, request: Request, body: dict[str, Any]) -> Response:
    api.principal(request)
    name = body["workflow"]
    wf = api.workflows.get(name)
    if wf is None:
        known = ", ".join(sorted(api.workflows)) or "none (start the server with --workflow FILE)"
        raise InputError(f"no workflow named {name!r} is served; these are: {known}")
    return _submitted(api, wf, body.get("input") or {}, body.get("key"), body.get("priority", 0), body.get("tenant"))


def _submitted(
    api: Api, wf: Workflow, data: Mapping[str, Any], key: str | None, priority: int = 0, tenant: str | None = None,
) -> Response:
    before = api.engine.store.task_by_key(key) if key is not None else None
    tid = api.engine.submit(wf, data, key=key, priority=priority, tenant=tenant)
    st = api.engine.state(tid)
    created = before is None
    return JSONResponse({"task_id": tid, "status": st.status.value, "created": created},
                        status_code=201 if created else 200)


def show_task(api: Api, request: Request, _: dict[str, Any]) -> Response:
    api.principal(request)
    tid = request.path_params["task_id"]
    st = api.engine.state(tid)
    waiting = waiting_reasons(api.engine.store.outbox(tid), api.engine.clock.now_ms()).get(tid)
    out = summary(st) | {"waiting": waiting, "state": st.to_dict(), "history": history_lines(st),
                         "events": [e.to_dict() for e in api.engine.events(tid)]}
    return JSONResponse(json.loads(json.dumps(out, default=str)))


def review(api: Api, request: Request, _: dict[str, Any]) -> Response:
    api.principal(request)
    data = api.engine.review(request.path_params["task_id"])
    return JSONResponse(json.loads(json.dumps(data, default=str)))


def _acted(task_id: str, st: Any, who: Principal) -> Response:
    return JSONResponse({"task_id": task_id, "status": st.status.value, "version": st.version, "by": who.name})


def approve(api: Api, request: Request, body: dict[str, Any]) -> Response:
    who = api.acting(request, body)
    tid = request.path_params["task_id"]
    st = api.engine.approve(tid, who, proposal_hash=body["proposal_hash"], comment=body.get("comment", ""))
    return _acted(tid, st, who)


def reject(api: Api, request: Request, body: dict[str, Any]) -> Response:
    who = api.acting(request, body)
    tid = request.path_params["task_id"]
    st = api.engine.reject(tid, who, reason_code=body["reason_code"], comment=body.get("comment", ""))
    return _acted(tid, st, who)


def evidence(api: Api, request: Request, body: dict[str, Any]) -> Response:
    who = api.acting(request, body)
    tid = request.path_params["task_id"]
    st = api.engine.add_evidence(tid, who, body["evidence"], body.get("note", ""))
    out = {"task_id": tid, "status": st.status.value, "version": st.version, "by": who.name}
    if st.status is TaskStatus.AWAITING_APPROVAL and st.current is not None:
        out["proposal_hash"] = st.current.proposal_hash
    return JSONResponse(out)


def retry(api: Api, request: Request, body: dict[str, Any]) -> Response:
    who = api.acting(request, body)
    tid = request.path_params["task_id"]
    return _acted(tid, api.engine.retry(tid, who, body["reason"]), who)


def cancel(api: Api, request: Request, body: dict[str, Any]) -> Response:
    who = api.acting(request, body)
    tid = request.path_params["task_id"]
    return _acted(tid, api.engine.cancel(tid, who, body["reason"]), who)


def inbox(api: Api, request: Request, _: dict[str, Any]) -> Response:
    who = api.principal(request)
    rows = api.engine.store.list_tasks(status=TaskStatus.AWAITING_APPROVAL.value)
    return JSONResponse({"tasks": [task_row(r) for r in _waiting_for(api, who, rows)]})


def halted(api: Api, request: Request, _: dict[str, Any]) -> Response:
    api.principal(request)
    rows = api.engine.store.list_tasks(status=TaskStatus.HALTED.value)
    return JSONResponse({"tasks": [task_row(r) for r in rows]})


# --- loop runs --------------------------------------------------------------------------------


@contextlib.contextmanager
def _loop_store(api: Api) -> Any:
    from statewright.loop.store import LoopStore

    if api.loop_db is None:  # the loop's runs are streams of the served store
        yield LoopStore(api.engine.store, owns=False)
        return
    if not api.loop_db.startswith(("postgresql://", "postgres://")) and not Path(api.loop_db).is_file():
        yield None
        return
    store = LoopStore.open(api.loop_db)
    try:
        yield store
    finally:
        store.close()


def runs(api: Api, request: Request, _: dict[str, Any]) -> Response:
    from statewright.loop.store import run_dict

    api.principal(request)
    limit = _int_param(request, "limit", 20, 1, 1000) or 20
    with _loop_store(api) as store:
        rows = [] if store is None else store.runs(loop=request.query_params.get("loop") or None, limit=limit)
        out = [run_dict(r, running=False) for r in rows]
    return JSONResponse({"runs": out, "loop_db": api.loop_db or ""})


def run_detail(api: Api, request: Request, _: dict[str, Any]) -> Response:
    from statewright.loop.store import line_dict, run_dict

    api.principal(request)
    run_id = request.path_params["run_id"]
    with _loop_store(api) as store:
        if store is None or not run_id.isdigit() or len(run_id) > 18:
            raise NotFoundError(f"no loop run with id {run_id!r}")
        try:
            row = store.run(run_id)
        except InputError:
            raise NotFoundError(f"no loop run with id {run_id!r}; list runs with GET /api/runs") from None
        lines = store.lines(row.run_id)
    return JSONResponse(json.loads(json.dumps(
        run_dict(row, running=False) | {"lines": [line_dict(x) for x in lines]}, default=str)))


# --- hooks ------------------------------------------------------------------------------------


async def _hook(api: Api, request: Request) -> Response:
    name = request.path_params["name"]
    hook = api.hooks.get(name)
    if hook is None:
        return error_response(NotFoundError(f"no hook named {name!r}"))
    raw = await request.body()
    try:
        if len(raw) > MAX_INPUT_BYTES:
            raise InputError(f"the body is {len(raw):,} bytes; the most is {MAX_INPUT_BYTES:,}")
        hook.check_signature(raw, request.headers.get(SIGNATURE_HEADER))
        delivery = request.headers.get(DELIVERY_HEADER, "").strip()
        if not delivery or len(delivery) > 200:
            raise InputError(f"hook {name!r}: the {DELIVERY_HEADER} header must name the delivery (1 to 200 "
                             "characters)")
        data = hook.task_input(loads_json_object(raw, f"hook {name!r}: the body"))
        return await run_in_threadpool(_submitted, api, hook.workflow, data, hook.key(delivery))
    except StatewrightError as exc:
        return error_response(exc)


# --- the app ----------------------------------------------------------------------------------


def api_routes(api: Api) -> list[BaseRoute]:
    def ep(handler: Handler, body: str | None = None) -> Callable[[Request], Awaitable[Response]]:
        return endpoint(api, handler, body=body)

    async def hook(request: Request) -> Response:
        return await _hook(api, request)

    return [
        Route("/api/tasks", ep(list_tasks), methods=["GET"]),
        Route("/api/tasks", ep(submit, "SubmitBody"), methods=["POST"]),
        Route("/api/tasks/{task_id}", ep(show_task), methods=["GET"]),
        Route("/api/tasks/{task_id}/review", ep(review), methods=["GET"]),
        Route("/api/tasks/{task_id}/approve", ep(approve, "ApproveBody"), methods=["POST"]),
        Route("/api/tasks/{task_id}/reject", ep(reject, "RejectBody"), methods=["POST"]),
        Route("/api/tasks/{task_id}/evidence", ep(evidence, "EvidenceBody"), methods=["POST"]),
        Route("/api/tasks/{task_id}/retry", ep(retry, "ReasonBody"), methods=["POST"]),
        Route("/api/tasks/{task_id}/cancel", ep(cancel, "ReasonBody"), methods=["POST"]),
        Route("/api/inbox", ep(inbox), methods=["GET"]),
        Route("/api/halted", ep(halted), methods=["GET"]),
        Route("/api/runs", ep(runs), methods=["GET"]),
        Route("/api/runs/{run_id}", ep(run_detail), methods=["GET"]),
        Route("/api/hooks/{name}", hook, methods=["POST"]),
    ]


def metrics_routes(engine: Engine, scan_limit: int = 10_000) -> list[BaseRoute]:
    """``/metrics`` alone (``serve --metrics-port`` serves it on a port of its own)."""

    def scrape() -> str:
        counts = engine.store.counts_by_status()
        rows = engine.store.list_tasks(limit=scan_limit)
        return metrics_text.render(counts, rows, engine.clock.now_ms())

    async def metrics(request: Request) -> Response:
        try:
            text = await run_in_threadpool(scrape)
        except StatewrightError as exc:
            return error_response(exc)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    return [Route("/metrics", metrics, methods=["GET"])]


def create_app(
    open_engine: Callable[[], Engine],
    *,
    workflows: Sequence[Workflow] = (),
    hooks: Mapping[str, Hook] | None = None,
    loop_db: str | None = None,
    metrics: bool = True,
    github: WebhookConfig | None = None,
) -> Starlette:
    """The API on the engine ``open_engine()`` returns (opened now, closed when the app
    shuts down). ``workflows`` are what POST /api/tasks may start, by name; ``loop_db`` is
    the SQLite file holding the outer loop's runs; ``metrics=False`` leaves out /metrics."""
    engine = open_engine()
    api = Api(engine, {wf.name: wf for wf in workflows}, dict(hooks or {}), loop_db)
    document = spec(metrics=metrics)

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    routes: list[BaseRoute] = [*api_routes(api), Route("/openapi.json", openapi, methods=["GET"])]
    if metrics:
        routes += metrics_routes(engine)
    if github is not None:  # POST /api/github/webhook: the repositories of its workflows
        from statewright.integrations.github.webhook import github_routes

        routes += github_routes(engine, github)
    # Extra route lists (remote agents, ...) are mounted here, and only here.
    for factory in ROUTE_FACTORIES:
        routes += factory(api)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        engine.close()

    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error, Exception: http_error})
    app.state.api = api
    return app
