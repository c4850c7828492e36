"""``statewright agent``: a remote agent that runs any command agent for a queue.

    claim      POST /api/agents/{queue}/claim?wait=S (long poll) with the agent identity's
               token (``STATEWRIGHT_TOKEN``); 204: nothing yet, ask again
    run        the command, exactly as a local ``type: command`` agent runs (``agents.py``):
               the brief in ``STATEWRIGHT_BRIEF``, the verdict read from the file at
               ``STATEWRIGHT_VERDICT``, a minimal environment (never ``STATEWRIGHT_TOKEN``),
               its own process group, the step's timeout, in the agent's working directory
               (``--workspace``)
    heartbeat  every third of the step's heartbeat interval while the command runs
    report     the verdict, or the failure's reason code and detail, by task token

Needs httpx (the ``[web]`` or ``[llm]`` extra)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .._errors import AuthenticationError, InputError, PermissionDeniedError, StatewrightError
from .agents import run_command_agent
from .base import AgentResult, ExecContext

log = logging.getLogger("statewright.agent")

DEFAULT_WAIT_SECONDS = 20.0  # how long one claim is held open by the server
RETRY_SECONDS = 5.0  # after the server could not be reached
MIN_HEARTBEAT_SECONDS = 0.25


class AgentRunError(StatewrightError):
    """The remote agent cannot go on: the server refused it (401, 403, 422) or is unreachable
    with ``--once``."""


@dataclass
class Handled:
    """One piece of work: where it went and what the server said about the report."""

    task_id: str
    step: str
    status: int
    answer: Mapping[str, Any]


class RemoteAgent:
    """Claims from one queue and runs ``command`` for each piece of work."""

    def __init__(
        self, server: str, queue: str, command: Sequence[str], token: str, *,
        wait_seconds: float = DEFAULT_WAIT_SECONDS, workspace: Path,
    ) -> None:
        import httpx

        self.queue = queue
        self.command = list(command)
        self.wait_seconds = wait_seconds
        self.workspace = workspace
        self.stopping = threading.Event()
        self.http = httpx.Client(
            base_url=server.rstrip("/"), headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(30.0, read=wait_seconds + 30.0),
        )

    def check_command(self) -> None:
        """The command can start here (before any work is claimed for it): InputError when not."""
        from ._process import find_executable
        from .base import step_base_env

        try:
            find_executable(self.command[0], self.workspace, step_base_env())
        except StatewrightError as exc:
            raise InputError(str(exc)) from None

    def close(self) -> None:
        self.http.close()

    def run(self, *, once: bool = False) -> int:
        """Handle work until stopped (or one piece, ``once``). Returns the exit status: 0, or
        1 when ``once`` and its report was refused."""
        import httpx

        while not self.stopping.is_set():
            try:
                work = self.claim()
            except httpx.TransportError as exc:
                if once:
                    raise AgentRunError(f"cannot reach {self.http.base_url} ({exc})") from None
                log.warning("cannot reach %s (%s); trying again in %.0f s", self.http.base_url, exc, RETRY_SECONDS)
                self.stopping.wait(RETRY_SECONDS)
                continue
            if work is None:
                continue
            done = self.handle(work)
            if once:
                return 0 if done.status == 200 else 1
        return 0

    def claim(self) -> dict[str, Any] | None:
        r = self.http.post(f"/api/agents/{self.queue}/claim", params={"wait": f"{self.wait_seconds:g}"})
        if r.status_code == 204:
            return None
        if r.status_code != 200:
            raise _refused(r)
        work = r.json()
        if not isinstance(work, dict) or not isinstance(work.get("token"), str):
            raise AgentRunError(f"{self.http.base_url} answered a claim with something that is not work")
        return work

    def handle(self, work: Mapping[str, Any]) -> Handled:
        """Run the command for ``work``, heartbeating while it runs, and report."""
        token = str(work["token"])
        log.info("task %s: %s #%s claimed from %s", work.get("task_id"), work.get("step"), work.get("attempt"),
                 self.queue)
        beating = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(token, float(work.get("heartbeat_seconds", 60)),
                                                              beating), daemon=True)
        beat.start()
        try:
            result = self._run(work)
        finally:
            beating.set()
            beat.join()
        body: dict[str, Any] = {"token": token, "note": result.note[-20_000:]}
        if result.error is None:
            if result.verdict is not None:
                body["verdict"] = dict(result.verdict)
        else:
            stderr = str(result.artifacts.get("stderr", "")).strip()
            body["error"] = str(result.error)
            body["detail"] = (f"{result.detail}: {stderr[-1500:]}" if stderr else result.detail)[-2000:]
        r = self.http.post("/api/agents/report", json=body)
        answer = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        if r.status_code == 200:
            log.info("task %s: reported (%s)", work.get("task_id"), _said(answer))
        else:
            log.warning("task %s: the report was refused (%s): %s", work.get("task_id"), r.status_code,
                        answer.get("error", r.text[:200]))
        return Handled(str(work.get("task_id")), str(work.get("step")), r.status_code, answer)

    def _run(self, work: Mapping[str, Any]) -> AgentResult:
        raw = work.get("brief")
        brief: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        ctx = ExecContext(
            task_id=str(work.get("task_id")), step=str(work.get("step")), attempt=int(work.get("attempt", 1)),
            idempotency_key=str(work.get("idempotency_key", "")), workspace=self.workspace,
            timeout_seconds=_seconds(work.get("timeout_seconds")),
            input=MappingProxyType(dict(brief.get("input") or {})),
            results=MappingProxyType(dict(brief.get("results") or {})),
        )
        schema = work.get("output_schema")
        try:
            return run_command_agent({"type": "command", "command": self.command}, brief,
                                     schema if isinstance(schema, Mapping) else None, ctx)
        except StatewrightError as exc:  # the command is missing, a bad schema: the attempt fails
            reason = getattr(exc, "reason", "error")
            return AgentResult(verdict=None, error=reason if isinstance(reason, str) else "error", detail=str(exc))

    def _heartbeat(self, token: str, every_seconds: float, done: threading.Event) -> None:
        import httpx

        interval = max(MIN_HEARTBEAT_SECONDS, every_seconds / 3)
        while not done.wait(interval):
            try:
                r = self.http.post("/api/agents/heartbeat", json={"token": token})
            except httpx.TransportError as exc:
                log.warning("heartbeat failed (%s); trying again", exc)
                continue
            if r.status_code != 200:
                log.warning("the heartbeat was refused (%s); the attempt is lost", r.status_code)
                return


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def _said(answer: Mapping[str, Any]) -> str:
    if answer.get("repair"):
        return f"the verdict goes back for repair: {answer['repair']}"
    if answer.get("reason"):
        return f"the attempt failed: {answer['reason']}"
    return f"task {answer.get('status', '?')}"


def _refused(r: Any) -> StatewrightError:
    try:
        why = r.json().get("error", "")
    except ValueError:
        why = r.text[:200]
    msg = f"the server refused the claim ({r.status_code}): {why}"
    if r.status_code == 401:
        return AuthenticationError(msg)
    if r.status_code == 403:
        return PermissionDeniedError(msg)
    if r.status_code == 422:
        return InputError(msg)
    return AgentRunError(msg)
