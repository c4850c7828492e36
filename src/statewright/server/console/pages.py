"""The web console's routes: server-rendered pages, their form posts, and one stream of
server-sent events that tells an open page to refresh its live parts.

    GET  /login, POST /login (token)      sign in; POST /logout signs out
    GET  /  /inbox  /halted  /runs  /runs/{id}  /tasks/{id}
    POST /tasks/{id}/approve | reject | retry | cancel     (form posts; the JSON API is /api/...)
    GET  /live[?task=ID]                  text/event-stream: ``change`` when what the page shows changed
    GET  /console/console.js, /console/console.css

A page needs a session (else: to /login); a post needs the session's ``csrf_token`` (else:
403). Every act is the engine's own (the engine checks the person again); a refusal is shown
on the page it came from, with the status the JSON API answers with."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from statewright._errors import (
    ApprovalError,
    AuthenticationError,
    InputError,
    Refusal,
    StatewrightError,
    TaskNotFoundError,
)
from statewright._names import OPERATOR_ROLE, split_role
from statewright.machine.state import TaskStatus
from statewright.runtime.users import Principal
from statewright.server.console import loop_runs, views
from statewright.server.console.sessions import (
    CSRF_FIELD,
    LOGIN_COOKIE,
    Session,
    Sessions,
    clear_session_cookie,
    keep_login_csrf,
    login_csrf,
    same,
    set_session_cookie,
)
from statewright.server.http import Api, NotFoundError, error_response

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY", "Cache-Control": "no-store"}
MAX_FORM_BYTES = 64 * 1024
STREAM_SECONDS = 120  # an event stream ends after this; the browser reconnects with its last id
_DONE = {"approved": "Approved.", "rejected": "Rejected.", "retried": "Retried: the halted step runs again.",
         "cancelled": "Cancelled.", "unparked": "Unparked: the next pass may pick the item again."}
_ACTS = ("approve", "reject", "retry", "cancel")
Signed = tuple[Session, Principal]


def _next_path(raw: str | None) -> str:
    """Where to go after signing in: a path on this site only."""
    if not raw or not raw.startswith("/") or raw.startswith("//") or "\\" in raw or len(raw) > 500:
        return "/"
    return raw


def _operator(who: Principal) -> bool:
    return any((parts := split_role(r)) is not None and parts[0] == OPERATOR_ROLE for r in who.roles)


async def read_form(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (the first value of each), within MAX_FORM_BYTES."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded" and (kind or request.headers.get("content-length", "0") != "0"):
        raise InputError("send the form as application/x-www-form-urlencoded")
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_FORM_BYTES:
            raise InputError(f"the form is over {MAX_FORM_BYTES:,} bytes")
    try:
        fields = parse_qs(raw.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        raise InputError("the form is not valid UTF-8 urlencoded text") from None
    return {k: v[0] for k, v in fields.items()}


class Console:
    """The pages over one ``Api`` (its engine and the loop's runs)."""

    def __init__(self, api: Api, *, poll_seconds: float = 0.5) -> None:
        self.api = api
        self.engine = api.engine
        self.sessions = Sessions(api.engine.users, api.engine.clock)
        self.poll_seconds = poll_seconds
        self.env = Environment(loader=PackageLoader("statewright.server.console", "templates"),
                               autoescape=select_autoescape(default=True, default_for_string=True))
        self.env.filters["diff_lines"] = views.diff_lines
        self.env.filters["pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=True, ensure_ascii=False,
                                                           default=str)
        static = resources.files("statewright.server.console") / "static"
        self.static = {name: (static / name).read_bytes() for name in ("console.js", "console.css")}
        self.static_hash = hashlib.sha256(b"".join(self.static.values())).hexdigest()[:12]

    # --- rendering --------------------------------------------------------------------------

    def render(self, request: Request, name: str, *, signed: Signed | None, status: int = 200,
               **context: Any) -> HTMLResponse:
        session, who = signed if signed is not None else (None, None)
        html = self.env.get_template(name).render(
            request_path=request.url.path, who=who, csrf=session.csrf if session else "", csrf_field=CSRF_FIELD,
            operator=who is not None and _operator(who), static_hash=self.static_hash, **context)
        return HTMLResponse(html, status_code=status, headers=HEADERS)

    def refused(self, request: Request, exc: StatewrightError, signed: Signed | None) -> HTMLResponse:
        """The error page for ``exc``, with the status the JSON API answers it with."""
        return self.render(request, "error.html", signed=signed, status=error_response(exc).status_code,
                           title="Refused",
                           message=" ".join(str(exc).split()))

    def page(self, build: Callable[[Request, Signed], dict[str, Any]], template: str
             ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            signed = await run_in_threadpool(self.sessions.current, request)
            if signed is None:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303, headers=HEADERS)
            try:
                context = await run_in_threadpool(build, request, signed)
            except StatewrightError as exc:
                return self.refused(request, exc, signed)
            return self.render(request, template, signed=signed, **context)

        return endpoint

    # --- signing in -------------------------------------------------------------------------

    async def login_form(self, request: Request) -> Response:
        return self._login_page(request, "", 200)

    def _login_page(self, request: Request, message: str, status: int) -> Response:
        value = login_csrf(request)
        response = self.render(request, "login.html", signed=None, status=status, message=message, title="Sign in",
                               login_csrf=value, next=_next_path(request.query_params.get("next")))
        keep_login_csrf(request, response, value)
        return response

    async def login(self, request: Request) -> Response:
        try:
            form = await read_form(request)
        except InputError as exc:
            return self._login_page(request, str(exc), 422)
        expected = request.cookies.get(LOGIN_COOKIE)
        if not expected or not same(form.get(CSRF_FIELD), expected):
            return self._login_page(request, "The sign-in form had expired or did not come from this site: "
                                             "sign in again.", 403)
        try:
            session_id, _ = await run_in_threadpool(self.sessions.open, form.get("token", "").strip())
        except AuthenticationError as exc:
            return self._login_page(request, f"Not signed in: {exc}.", 401)
        response = RedirectResponse(_next_path(form.get("next")), status_code=303, headers=HEADERS)
        set_session_cookie(response, request, session_id)
        return response

    async def logout(self, request: Request) -> Response:
        signed = await self._posted(request)
        if isinstance(signed, Response):
            return signed
        self.sessions.close(request)
        response = RedirectResponse("/login", status_code=303, headers=HEADERS)
        clear_session_cookie(response, request)
        return response

    async def _posted(self, request: Request) -> tuple[Signed, dict[str, str]] | Response:
        """The post's session and form, or the refusal: 403 without a session or the right
        CSRF token, 422 for a form that cannot be read."""
        signed = await run_in_threadpool(self.sessions.current, request)
        try:
            form = await read_form(request)
        except InputError as exc:
            return self.refused(request, exc, signed)
        if signed is None:
            return self.render(request, "error.html", signed=None, status=403,
                               message="Refused: you are not signed in (or your session ended). Sign in and try again.")
        if not same(form.get(CSRF_FIELD), signed[0].csrf):
            return self.render(request, "error.html", signed=signed, status=403,
                               message="Refused: the form's csrf_token is missing or wrong. Reload the page and "
                                       "try again.")
        return signed, form

    # --- pages ------------------------------------------------------------------------------

    def dashboard(self, request: Request, signed: Signed) -> dict[str, Any]:
        return {"title": "Dashboard", "live": "/live", "data": views.dashboard(self.engine)}

    def inbox(self, request: Request, signed: Signed) -> dict[str, Any]:
        return {"title": "Inbox", "live": "/live", "rows": views.inbox(self.engine, signed[1])}

    def halted(self, request: Request, signed: Signed) -> dict[str, Any]:
        return {"title": "Operator queue", "live": "/live", "rows": views.halted(self.engine),
                "notice": _DONE.get(request.query_params.get("done", ""))}

    def task(self, request: Request, signed: Signed) -> dict[str, Any]:
        tid = request.path_params["task_id"]
        done = _DONE.get(request.query_params.get("done", ""))
        return self._task_context(tid, signed, notice=done)

    def _task_context(self, tid: str, signed: Signed, *, notice: str | None = None, error: str | None = None,
                      form: dict[str, str] | None = None) -> dict[str, Any]:
        return {"title": f"Task {tid}", "live": f"/live?task={quote(tid, safe='')}",
                "self_url": f"/tasks/{quote(tid, safe='')}", "notice": notice,
                "error": error, "form": form or {}, **views.task(self.engine, tid, signed[1])}

    def brief(self, request: Request, signed: Signed) -> dict[str, Any]:
        tid, step, number = (request.path_params[k] for k in ("task_id", "step", "number"))
        found = views.brief(self.engine, tid, step, int(number))
        if found is None:
            raise NotFoundError(f"task {tid} has no attempt #{number} of an ai step {step!r}")
        return {"title": f"Brief of {step} #{number}", "task_id": tid, "step": step, "number": number,
                "brief": found}

    def runs(self, request: Request, signed: Signed) -> dict[str, Any]:
        return {"title": "Loop runs", "runs": loop_runs.loop_runs(self.api.loop_db)}

    def run(self, request: Request, signed: Signed) -> dict[str, Any]:
        return self._run_context(request.path_params["run_id"],
                                 notice=_DONE.get(request.query_params.get("done", "")))

    def _run_context(self, run_id: str, *, notice: str | None = None, error: str | None = None) -> dict[str, Any]:
        run = loop_runs.loop_run(self.api.loop_db, run_id)
        if run is None:
            raise NotFoundError(f"no loop run with id {run_id!r}")
        return {"title": f"Loop run {run_id}", "run": run, "notice": notice, "error": error}

    def _unpark(self, run_id: str, who: Principal, form: dict[str, str]) -> None:
        who = self.engine.users.check(who, role=OPERATOR_ROLE, act="unpark an item")
        reason, item = form.get("reason", "").strip(), form.get("item", "").strip()
        if not reason:
            raise InputError("unpark needs a reason: say why, for the record")
        loop_runs.unpark(self.api.loop_db, run_id, item, actor=who.name, reason=reason,
                         at_ms=self.engine.clock.now_ms())

    async def unparked(self, request: Request) -> Response:
        """POST /runs/{id}/unpark (item, reason): an operator reopens a parked item."""
        posted = await self._posted(request)
        if isinstance(posted, Response):
            return posted
        signed, form = posted
        run_id = request.path_params["run_id"]
        try:
            await run_in_threadpool(self._unpark, run_id, signed[1], form)
        except StatewrightError as exc:
            try:
                context = await run_in_threadpool(self._run_context, run_id, error=" ".join(str(exc).split()))
            except StatewrightError:
                return self.refused(request, exc, signed)
            return self.render(request, "run.html", signed=signed, status=error_response(exc).status_code, **context)
        return RedirectResponse(f"/runs/{quote(run_id, safe='')}?done=unparked", status_code=303, headers=HEADERS)

    # --- acts -------------------------------------------------------------------------------

    def _act(self, act: str, tid: str, who: Principal, form: dict[str, str]) -> None:
        who = self.engine.users.check(who, act="act")
        if act == "approve":
            shown = form.get("proposal_hash", "").strip()
            if not shown:
                raise InputError("approve needs the proposal_hash the page showed")
            self.engine.approve(tid, who, proposal_hash=shown, comment=form.get("comment", ""))
        elif act == "reject":
            code = form.get("reason_code", "").strip()
            if not code:
                raise InputError("reject needs a reason code")
            self.engine.reject(tid, who, reason_code=code, comment=form.get("comment", ""))
        else:
            reason = form.get("reason", "").strip()
            if not reason:
                raise InputError(f"{act} needs a reason: say why, for the record")
            (self.engine.retry if act == "retry" else self.engine.cancel)(tid, who, reason)

    def acted(self, act: str) -> Callable[[Request], Awaitable[Response]]:
        past = {"approve": "approved", "reject": "rejected", "retry": "retried", "cancel": "cancelled"}[act]

        async def endpoint(request: Request) -> Response:
            posted = await self._posted(request)
            if isinstance(posted, Response):
                return posted
            signed, form = posted
            tid = request.path_params["task_id"]
            back = form.get("back", "")
            try:
                await run_in_threadpool(self._act, act, tid, signed[1], form)
            except TaskNotFoundError as exc:
                return self.refused(request, exc, signed)
            except StatewrightError as exc:
                status = error_response(exc).status_code
                message = " ".join(str(exc).split())
                if isinstance(exc, ApprovalError) and exc.refusal is Refusal.STALE:
                    message = ("The proposal changed while the page was open, so nothing was approved. "
                               f"Read the proposal as it is now, below, and approve again if it is right. ({message})")
                try:
                    context = await run_in_threadpool(self._task_context, tid, signed, error=message, form=form)
                except StatewrightError:
                    return self.refused(request, exc, signed)
                return self.render(request, "task.html", signed=signed, status=status, **context)
            if back == "halted" and act in ("retry", "cancel"):
                return RedirectResponse(f"/halted?done={past}", status_code=303, headers=HEADERS)
            return RedirectResponse(f"/tasks/{quote(tid, safe='')}?done={past}", status_code=303, headers=HEADERS)

        return endpoint

    # --- live updates -----------------------------------------------------------------------

    def _stamp(self, task_id: str | None) -> str:
        """What changes when what a page shows changes: the task's version, or every open
        task's id and version with the counts by status."""
        if task_id is not None:
            row = self.engine.store.load(task_id)
            return "" if row is None else f"{row.version}:{row.status}"
        parts = [json.dumps(self.engine.store.counts_by_status(), sort_keys=True)]
        for status in (TaskStatus.RUNNING, TaskStatus.WAITING, TaskStatus.AWAITING_APPROVAL, TaskStatus.HALTED):
            parts += [f"{r.task_id}:{r.version}" for r in self.engine.store.list_tasks(status=status.value,
                                                                                       limit=views.SCAN_LIMIT)]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    async def live(self, request: Request) -> Response:
        signed = await run_in_threadpool(self.sessions.current, request)
        if signed is None:
            return Response("sign in first\n", status_code=401, media_type="text/plain", headers=HEADERS)
        task_id = (request.query_params.get("task") or "")[:200] or None
        poll = self.poll_seconds
        seen = request.headers.get("last-event-id", "")[:100]  # a reconnecting browser's last stamp

        async def stream() -> AsyncIterator[bytes]:
            # Each message's id is the stamp it reports, so a browser that reconnects (the
            # stream ends after STREAM_SECONDS) hears at once of a change made in between.
            last = await run_in_threadpool(self._stamp, task_id)
            if seen and seen != last:
                yield f"id: {last}\nretry: 2000\nevent: change\ndata: {{}}\n\n".encode()
            else:
                yield f"id: {last}\nretry: 2000\n\n".encode()
            idle = 0.0
            for _ in range(int(STREAM_SECONDS / poll)):
                if await request.is_disconnected():
                    return
                await asyncio.sleep(poll)
                try:
                    now = await run_in_threadpool(self._stamp, task_id)
                except StatewrightError:
                    continue
                if now != last:
                    last, idle = now, 0.0
                    yield f"id: {now}\nevent: change\ndata: {{}}\n\n".encode()
                else:
                    idle += poll
                    if idle >= 15:
                        idle = 0.0
                        yield b": still here\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers=HEADERS | {"X-Accel-Buffering": "no"})

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        body = self.static.get(name)
        if body is None:
            return Response("not found\n", status_code=404, media_type="text/plain", headers=HEADERS)
        kind = "text/javascript" if name.endswith(".js") else "text/css"
        return Response(body, media_type=f"{kind}; charset=utf-8",
                        headers=HEADERS | {"Cache-Control": "public, max-age=86400"})

    def routes(self) -> list[BaseRoute]:
        routes: list[BaseRoute] = [
            Route("/login", self.login_form, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/", self.page(self.dashboard, "dashboard.html"), methods=["GET"]),
            Route("/inbox", self.page(self.inbox, "inbox.html"), methods=["GET"]),
            Route("/halted", self.page(self.halted, "halted.html"), methods=["GET"]),
            Route("/runs", self.page(self.runs, "runs.html"), methods=["GET"]),
            Route("/runs/{run_id}", self.page(self.run, "run.html"), methods=["GET"]),
            Route("/tasks/{task_id}", self.page(self.task, "task.html"), methods=["GET"]),
            Route("/tasks/{task_id}/brief/{step}/{number:int}", self.page(self.brief, "brief.html"), methods=["GET"]),
            Route("/live", self.live, methods=["GET"]),
            Route("/console/{name}", self.asset, methods=["GET"]),
        ]
        routes += [Route(f"/tasks/{{task_id}}/{act}", self.acted(act), methods=["POST"]) for act in _ACTS]
        routes.append(Route("/runs/{run_id}/unpark", self.unparked, methods=["POST"]))
        return routes


def console_routes(api: Api) -> list[BaseRoute]:
    """The web console's routes over ``api`` (mounted by ``create_app``)."""
    return Console(api).routes()
