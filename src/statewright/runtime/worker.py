"""Workers claim due commands under a lease with a fencing token, perform them, and report
the outcome as an event. The transaction that records an outcome also claims the task's
next command for the same worker, so a step costs one commit."""

from __future__ import annotations

import logging
import os
import random
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statewright._crash import crash_point
from statewright._errors import (
    IllegalEventError,
    PermanentError,
    StaleLeaseError,
    StoreError,
    TaskNotFoundError,
    TransientError,
)
from statewright.definition.model import Step, StepKind
from statewright.machine.events import AttemptReported, CheckReported, Event, TimerFired
from statewright.machine.state import TaskState
from statewright.runtime import workspaces
from statewright.runtime.clock import SystemClock
from statewright.runtime.engine import Engine
from statewright.runtime.workspaces import AttemptSpace
from statewright.store.base import Claim

log = logging.getLogger("statewright.worker")

DEFAULT_LEASE_SECONDS = 30.0
IDLE_POLL_SECONDS = 0.02
IDLE_WAIT_MAX_SECONDS = 1.0
_WORKSPACE_CACHE_SIZE = 1024  # resolved workspace paths a worker remembers


@dataclass
class WorkerStats:
    commands: int = 0
    timers: int = 0
    retries: int = 0
    stale: int = 0


class Worker:
    def __init__(
        self,
        engine: Engine,
        *,
        worker_id: str | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        concurrency: int = 1,
        idle_poll_seconds: float = IDLE_POLL_SECONDS,
        rng: random.Random | None = None,
    ) -> None:
        self.engine = engine
        self.store = engine.store
        self.clock = engine.clock
        self.worker_id = worker_id or _default_worker_id(self)
        self.lease_ms = int(lease_seconds * 1000)
        self.concurrency = max(1, concurrency)
        self.idle_poll_seconds = idle_poll_seconds
        self.rng = rng or random.Random()
        self.stats = WorkerStats()
        self.stopping = threading.Event()
        self._held: dict[str, int] = {}
        self._held_lock = threading.Lock()
        # The state a report of ours wrote, keyed by the command the same commit claimed for
        # us: performing that command then needs no read back (a stale one loses cleanly in
        # Engine.apply and is read again).
        self._chained: dict[str, TaskState] = {}
        self._workspaces: dict[tuple[object, ...], Path] = {}
        self._env = workspaces.child_env()
        self._failure: StoreError | None = None

    # --- lifecycle ---------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """SIGTERM / Ctrl-C: stop claiming, finish what is held, exit cleanly."""

        def handler(signum: int, frame: object) -> None:
            self.stopping.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def run(self, *, until_idle: bool = False, until: Callable[[], bool] | None = None) -> WorkerStats:
        heartbeat = threading.Thread(target=self._heartbeat, daemon=True)
        heartbeat.start()
        threads = [
            threading.Thread(target=self._guarded_loop, args=(until_idle, until), daemon=True)
            for _ in range(self.concurrency - 1)
        ]
        for t in threads:
            t.start()
        try:
            self._loop(until_idle, until)
        finally:
            self.stopping.set()
            for t in threads:
                t.join()
            heartbeat.join()  # no renewal may touch the store after run() returns
            self._release_all()
        if self._failure is not None:
            raise self._failure
        return self.stats

    def _guarded_loop(self, until_idle: bool, until: Callable[[], bool] | None) -> None:
        """An extra thread's loop: a lost store stops the whole worker, and run() re-raises."""
        try:
            self._loop(until_idle, until)
        except StoreError as exc:
            self._failure = exc
            self.stopping.set()

    def _loop(self, until_idle: bool, until: Callable[[], bool] | None) -> None:
        while not self.stopping.is_set():
            if until is not None and until():
                self.stopping.set()
                return
            did = self.run_once()
            if did:
                continue
            if until_idle:
                self.stopping.set()
                return
            self._wait_idle()

    def _wait_idle(self) -> None:
        """Idle: PostgreSQL wakes us by LISTEN/NOTIFY; otherwise poll briefly."""
        if isinstance(self.clock, SystemClock) and self.store.announces_work:
            self.store.wait_for_work(self._idle_wait(IDLE_WAIT_MAX_SECONDS), self.stopping)
        else:
            self.clock.sleep(self._idle_wait(self.idle_poll_seconds), self.stopping)

    def _idle_wait(self, cap: float) -> float:
        due = self.store.next_due_ms()
        if due is None:
            return cap
        gap = (due - self.clock.now_ms()) / 1000
        return max(0.0, min(cap, gap)) if gap > 0 else 0.0

    def run_once(self) -> bool:
        """Fire due timers, then claim and perform one command (and the chain of commands
        its outcome claims for us). Returns whether anything was done."""
        did = self._fire_timers()
        if self.stopping.is_set():
            return did
        claims = self.store.claim(self.worker_id, self.clock.now_ms(), self.lease_ms, 1)
        for claim in claims:
            nxt: Claim | None = claim
            while nxt is not None:
                crash_point("after_claim")
                nxt = self._perform(nxt)
                if self.stopping.is_set() and nxt is not None:
                    self._chained.pop(nxt.command_id, None)
                    self.store.release(nxt.command_id, nxt.token, self.clock.now_ms(), failed=False)
                    nxt = None
            did = True
        return did

    # --- timers ------------------------------------------------------------------------
    def _fire_timers(self) -> bool:
        timers = self.store.claim_timers(self.worker_id, self.clock.now_ms(), self.lease_ms, 10)
        for t in timers:
            ev = TimerFired(event_id=f"{t.timer_id}:fired", at_ms=self.clock.now_ms(), timer_id=t.timer_id)
            try:
                applied = self.engine.apply(t.task_id, ev, complete_timer=(t.timer_id, t.token),
                                            claim_for=self._claim_for())
            except (IllegalEventError, TaskNotFoundError):
                self.store.drop_timer(t.timer_id, t.token)
                continue
            except StaleLeaseError:
                continue
            self.stats.timers += 1
            nxt = applied.claimed
            if nxt is not None:
                self._chained[nxt.command_id] = applied.state
            while nxt is not None:
                nxt = self._perform(nxt)
        return bool(timers)

    # --- commands ----------------------------------------------------------------------
    def _claim_for(self) -> tuple[str, int]:
        return (self.worker_id, self.clock.now_ms() + self.lease_ms)

    def _perform(self, claim: Claim) -> Claim | None:
        """Perform one claimed command; returns the next command claimed for us, if any."""
        with self._held_lock:
            self._held[claim.command_id] = claim.token
        try:
            return self._perform_held(claim)
        finally:
            with self._held_lock:
                self._held.pop(claim.command_id, None)

    def _perform_held(self, claim: Claim) -> Claim | None:
        body = claim.body
        result_id = f"{claim.command_id}:result"
        chained = self._chained.pop(claim.command_id, None)
        if claim.deliveries > 1 and self.store.has_event(result_id):
            self.store.ack(claim.command_id, claim.token)  # outcome already recorded
            return None
        if claim.type == "RequestApproval":
            log.info(
                "task %s waits for approval at %s (role %s, proposal %s)",
                claim.task_id, body.get("step"), body.get("role"), body.get("proposal_hash"),
            )
            self.store.ack(claim.command_id, claim.token)
            self.stats.commands += 1
            return None
        try:
            state = chained if chained is not None else self.engine.state(claim.task_id)
            step = state.workflow.step(str(body["step"]))
        except (TaskNotFoundError, KeyError):
            self.store.ack(claim.command_id, claim.token)
            return None
        crash_point("before_effect")
        event: Event | None
        try:
            event = self._execute(claim, state, step, result_id)
        except Exception as exc:  # classified: transient -> retry later; else a step failure
            event = self._on_error(claim, step, exc, result_id)
        if event is None:
            return None
        crash_point("after_effect")
        try:
            applied = self.engine.apply(
                claim.task_id, event, complete=(claim.command_id, claim.token),
                claim_for=None if self.stopping.is_set() else self._claim_for(), state=state,
            )
        except IllegalEventError:
            self.stats.stale += 1
            self.store.ack(claim.command_id, claim.token)
            return None
        except StaleLeaseError:
            self.stats.stale += 1
            log.warning("lease on %s was lost; the report was refused", claim.command_id)
            return None
        crash_point("after_append")
        self.stats.commands += 1
        if applied.claimed is not None:
            self._chained[applied.claimed.command_id] = applied.state
        return applied.claimed

    def _context(self, claim: Claim, state: TaskState, step: Step, space: AttemptSpace | None = None) -> Any:
        from statewright.executors.base import ExecContext

        if space is not None:
            resolved = space.path
        else:
            ws = state.input.get("workspace") if isinstance(state.input, Mapping) else None
            key = (str(ws),) if ws else (self.engine.workspace_root, state.task_id)
            cached = self._workspaces.get(key)
            if cached is None or not os.path.isdir(cached):
                workspace = Path(str(ws)) if ws else self.engine.workspace_root / state.task_id
                workspace.mkdir(parents=True, exist_ok=True)
                cached = workspace.resolve()
                if len(self._workspaces) >= _WORKSPACE_CACHE_SIZE:
                    self._workspaces.clear()
                self._workspaces[key] = cached
            resolved = cached
        return ExecContext(
            task_id=state.task_id, step=step.id, attempt=int(claim.body.get("attempt", 1)),
            idempotency_key=str(claim.body.get("idempotency_key", claim.command_id)),
            workspace=resolved, timeout_seconds=step.timeout_seconds, env=self._env,
        )

    def _execute(self, claim: Claim, state: TaskState, step: Step, result_id: str) -> Event:
        from statewright import executors

        now = self.clock.now_ms
        body = claim.body
        attempt = int(body.get("attempt", 1))
        if step.kind is StepKind.AI:
            space = workspaces.for_ai_attempt(self.engine.workspace_root, state, step, attempt)
        else:
            space = workspaces.for_check(state, step)
        ctx = self._context(claim, state, step, space)
        if claim.type == "RunCheck":
            res = executors.run_check(step.check or {}, ctx)
            return CheckReported(
                event_id=result_id, at_ms=now(), command_id=claim.command_id, step=step.id,
                attempt=ctx.attempt, check_number=int(body.get("check_number", 1)),
                passed=res.passed, detail=res.detail or (res.reason or ""), output=res.output,
            )
        if step.kind is StepKind.AI:
            brief = body.get("brief") or {}
            ares = executors.run_agent(step.agent or {}, brief, step.output_schema, ctx)
            kind = str((step.agent or {}).get("type", "agent"))
            artifacts = dict(ares.artifacts)
            error, detail = ares.error, ares.detail
            if error == "no_verdict" and kind != "openai":
                error = "invalid_verdict"  # the reducer grants one repair turn, then fails it
            if space is not None and space.per_attempt:
                artifacts.update(workspace=str(space.path), base_commit=space.base_commit)
                touched = workspaces.protected_touched(space)
                if touched:
                    error = "protected_path_modified"
                    detail = "the attempt changed protected paths: " + ", ".join(touched)
            return AttemptReported(
                event_id=result_id, at_ms=now(), command_id=claim.command_id, step=step.id,
                attempt=ctx.attempt, actor=f"agent:{kind}", ok=error is None,
                verdict=dict(ares.verdict) if ares.verdict is not None else None,
                error=error, detail=detail, output=detail,
                artifacts=artifacts, cost=ares.cost.to_dict(), note=ares.note,
            )
        cres = executors.run_code(step.run or {}, ctx)
        return AttemptReported(
            event_id=result_id, at_ms=now(), command_id=claim.command_id, step=step.id,
            attempt=ctx.attempt, actor=f"code:{step.id}", ok=cres.ok,
            error=None if cres.ok else (cres.reason or "failed"), output=cres.output,
            detail="" if cres.ok else _last_line(cres.output), artifacts=dict(cres.artifacts),
            cost=cres.cost.to_dict(),
        )

    def _on_error(self, claim: Claim, step: Step, exc: Exception, result_id: str) -> Event | None:
        policy = step.retry
        name = type(exc).__name__
        failures = claim.failures + 1
        retryable = isinstance(exc, TransientError) and name not in policy.non_retryable
        if retryable and failures < policy.max_attempts:
            delay = policy.backoff_seconds(failures, self.rng.random())
            self.stats.retries += 1
            self.store.release(
                claim.command_id, claim.token, self.clock.now_ms() + int(delay * 1000),
                failed=True, error=f"{name}: {exc}",
            )
            return None
        if retryable:
            reason = "retries_exhausted"
        elif isinstance(exc, TransientError):
            reason = "non_retryable"  # the step's retry policy lists this error class
        elif isinstance(exc, PermanentError):
            reason = exc.reason if exc.reason != "error" else "permanent_error"
        else:
            reason = "executor_error"
        detail = f"{name}: {exc} (after {failures} tries)"
        if claim.type == "RunCheck":
            return CheckReported(
                event_id=result_id, at_ms=self.clock.now_ms(), command_id=claim.command_id,
                step=step.id, attempt=int(claim.body.get("attempt", 1)),
                check_number=int(claim.body.get("check_number", 1)), passed=False, detail=detail,
            )
        return AttemptReported(
            event_id=result_id, at_ms=self.clock.now_ms(), command_id=claim.command_id,
            step=step.id, attempt=int(claim.body.get("attempt", 1)), actor=f"worker:{self.worker_id}",
            ok=False, error=reason, detail=detail,
        )

    # --- leases ------------------------------------------------------------------------
    def _heartbeat(self) -> None:
        interval = max(0.05, self.lease_ms / 3000)
        while not self.stopping.wait(interval):
            with self._held_lock:
                held = list(self._held.items())
            try:
                for cid, token in held:
                    self.store.renew(cid, token, self.clock.now_ms(), self.lease_ms)
            except StoreError as exc:
                log.error("lost the store (%s); stopping: held leases will expire", exc)
                self.stopping.set()
                return

    def _release_all(self) -> None:
        with self._held_lock:
            held = list(self._held.items())
        try:
            for cid, token in held:
                self.store.release(cid, token, self.clock.now_ms(), failed=False)
        except StoreError:
            return  # the store is gone; the leases expire on their own


def _default_worker_id(worker: Worker) -> str:
    import socket  # only here: importing it is a noticeable part of ``import statewright``

    return f"{socket.gethostname()}:{os.getpid()}:{id(worker):x}"


def _last_line(text: str) -> str:
    """The last line the command itself printed (the executor's own ``[statewright: ...]``
    marker says less than the line before it, unless it is all there is)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    own = [ln for ln in lines if not ln.startswith("[statewright:")]
    pick = own or lines
    return pick[-1][:200] if pick else ""
