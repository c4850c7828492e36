"""Workers claim due commands under a lease with a fencing token, perform them, and report
the outcome as an event. The transaction that records an outcome also claims the task's
next command for the same worker, and outcomes that are ready together share that
transaction (group commit), so a step costs at most one commit.

Poison work never stops a worker: every outcome passes ``screen`` before the reducer; an
exception while handling one command fails that command's attempt (``handling_error``)
instead of the worker; an outcome the store refuses with anything but a store error is
recorded as that failure, alone, while the rest of its group commits. Only when even that
failure cannot be recorded does the worker stop: it releases its leases and ``run`` raises
WorkerStoppedError. A step that ends the worker's process leaves no outcome to fail: once a
command was started ``max_deliveries`` times by workers that all died before reporting, the
next one fails it (``worker_died``) instead of running it; a claim given back before it was
started does not count as a delivery."""

from __future__ import annotations

import copy
import logging
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from statewright._crash import crash_point
from statewright._errors import (
    IllegalEventError,
    PermanentError,
    StaleLeaseError,
    StatewrightError,
    StoreError,
    TaskNotFoundError,
    TransientError,
    WorkerStoppedError,
)
from statewright.definition.model import RetryPolicy, Step, StepKind
from statewright.machine._records import replace
from statewright.machine.events import (
    ArtifactsCaptured,
    AttemptReported,
    CheckReported,
    Event,
    NotificationSent,
    TimerFired,
)
from statewright.machine.seam import LOOP_RUN_COMMANDS
from statewright.machine.state import TaskState, TaskStatus
from statewright.machine.task import APPROVAL_REVOKED, ARTIFACT_CHANGED
from statewright.runtime import artifacts, workspaces
from statewright.runtime.clock import SystemClock
from statewright.runtime.engine import Applied, Engine, Report
from statewright.runtime.users import approval_problem
from statewright.runtime.workspaces import AttemptSpace
from statewright.store.base import Claim, Wake

if TYPE_CHECKING:
    from statewright.executors._isolation import Redactor
    from statewright.runtime.notify import Notifier

log = logging.getLogger("statewright.worker")
SETTLED = frozenset({
    TaskStatus.COMPLETED, TaskStatus.COMPLETED_EARLY, TaskStatus.HALTED, TaskStatus.CANCELLED,
    TaskStatus.AWAITING_APPROVAL,
})  # where run_one hands a task back: ended, or waiting for a person

DEFAULT_LEASE_SECONDS = 30.0
IDLE_POLL_SECONDS = 0.02
IDLE_WAIT_MAX_SECONDS = 1.0
DEFAULT_BATCH = 32  # outcomes one commit may carry
READY_HOLD_SECONDS = 1.0  # a claimed command no executor starts within this is given back
TIMER_CHECK_SECONDS = 0.1  # how often a worker with work in hand looks for due timers
COMMIT_DELAY_SECONDS = 0.002  # how long a commit waits for outcomes that are being produced
PREFETCH_SECONDS = 0.005  # how much work (by the average step's duration) a worker claims ahead
_WORKSPACE_CACHE_SIZE = 1024  # resolved workspace paths a worker remembers
WORKSPACE_RECHECK_SECONDS = 1.0  # how long a remembered workspace is trusted to still exist
UNHANDLED_DELAY_SECONDS = 300.0  # a command no failure could be recorded for waits this long
LABEL_TRIES = 8  # tries of one SyncLabels against a GitHub that fails in a way worth retrying
MAX_DELIVERIES = 5  # starts without an outcome after which a command is failed, not run again


@dataclass
class WorkerStats:
    """What a worker did: commands performed, timers fired, retries, and stale reports refused."""

    commands: int = 0
    timers: int = 0
    retries: int = 0
    stale: int = 0


class Worker:
    """Executor threads (``concurrency`` of them) perform claimed commands and hand each
    outcome to one committer thread. The committer writes every outcome that is waiting in
    one transaction (group commit: outcomes that arrive while a commit is in flight share
    the next one, up to ``batch``), and that commit also claims each task's next command
    for this worker. An executor never waits for a commit while it has other work, so the
    time a commit spends on the disk overlaps with performing the next steps."""

    def __init__(
        self,
        engine: Engine,
        *,
        worker_id: str | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        concurrency: int = 1,
        idle_poll_seconds: float = IDLE_POLL_SECONDS,
        batch: int = DEFAULT_BATCH,
        max_deliveries: int = MAX_DELIVERIES,
        rng: random.Random | None = None,
        notifier: Notifier | None = None,
        handlers: Mapping[str, Callable[[Mapping[str, Any]], None]] | None = None,
    ) -> None:
        self.engine = engine
        # Handlers of commands that are not a task's, by command type (the loop's WakeRun:
        # ``statewright.loop.wake.handlers``); each is given the command's body.
        self.handlers = dict(handlers or {})
        self.store = engine.store
        self.clock = engine.clock
        self.worker_id = worker_id or _default_worker_id(self)
        self.lease_ms = int(lease_seconds * 1000)
        self.concurrency = max(1, concurrency)
        self.idle_poll_seconds = idle_poll_seconds
        self.batch = max(1, batch)
        self.max_deliveries = max(1, max_deliveries)
        self.rng = rng or random.Random()
        self._notifier = notifier  # made on first use: most workers never send one
        self.stats = WorkerStats()
        # Set when work is handed to us or we stop: an idle executor waits on it, so a
        # command a submit or a commit of ours claimed for us starts at once.
        self._wake = threading.Event()
        self.stopping: threading.Event = _Stopping(self._wake)
        self._held: dict[str, Claim] = {}  # command id -> the claim we hold on it
        self._gated: dict[str, tuple[str, ...]] = {}  # command id -> the gates its claim holds
        self._ended: list[tuple[str, ...]] = []  # the gates of claims ended, their waiters not yet woken
        self._held_lock = threading.Lock()
        self.renewing = threading.Lock()  # held while the process's renewal thread renews our leases
        # The state a report of ours wrote, keyed by the command the same commit claimed for
        # us: performing that command then needs no read back (a stale one loses cleanly in
        # Engine.apply and is read again).
        self._chained: dict[str, TaskState] = {}
        # Claims a submit or an approval made for us (Engine's ``hold_for``), by task.
        self._handed: dict[str, Claim] = {}
        self._workspaces: dict[tuple[object, ...], tuple[Path, float]] = {}  # path, next check
        # What the worker holds: its environment, and the store's URL as it was given (the
        # password of a --db URL is in no environment variable). Imported here: the
        # executors (and jsonschema) are not loaded by ``import statewright``.
        from statewright.executors._isolation import LOG_FILTER, Redactor, secrets_in

        held = secrets_in(os.environ, [self.store.url, str(getattr(self.store, "_conninfo", ""))])
        self._redactor = Redactor(held)
        LOG_FILTER.know(held)
        log.addFilter(LOG_FILTER)  # known secrets never reach a log line (added once)
        self._step_redactors: dict[tuple[str, ...], Redactor] = {}
        self._failure: StatewrightError | None = None
        self._failure_cause: BaseException | None = None
        # The pipeline between the executors and the committer, guarded by _cv.
        pipeline_lock = threading.RLock()
        self._cv = threading.Condition(pipeline_lock)
        # What wait_for waits on, under the same lock: a task it waits on settled, or the
        # worker stops. Not _cv, which is notified several times a step.
        self._settled_cv = threading.Condition(pipeline_lock)
        self._ready: deque[Claim] = deque()  # claimed for us, not yet started
        self._ready_since: dict[str, float] = {}  # command id -> when it joined _ready
        self._staged: list[Report] = []  # performed, waiting for the committer
        self._pending = 0  # outcomes staged or being committed
        self._busy = 0  # executors performing a command or claiming
        self._committing = False  # a thread is committing outcomes (one at a time)
        self._idle = 0  # executors waiting for work in _wait_idle
        self._commits = 0  # commits of outcomes done (each may have made work due)
        self._claimed_at = 0  # what _commits was when the last claim began
        self._executors_done = False
        self._step_seconds: float | None = None  # moving average of performing one command
        # Until then the last claim's finding stands (it came back short: no more work due):
        # no new claim while outcomes are pending, and a lone outcome is committed by its executor
        self._fresh_after = 0.0
        self._timers_due = 0.0  # when a worker with work in hand next looks for due timers
        self._pipeline = False  # run() is working
        self._awaited: set[str] = set()  # tasks wait_for() waits on
        self._settled: dict[str, TaskState] = {}  # their states once a commit of ours settled them

    @property
    def notifier(self) -> Notifier:
        if self._notifier is None:
            from statewright.runtime.notify import Notifier

            self._notifier = Notifier()
        return self._notifier

    # --- lifecycle ---------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """SIGTERM / Ctrl-C: stop claiming, finish what is held, exit cleanly."""
        import signal  # here: a script that runs a task in its own thread never needs it

        def handler(signum: int, frame: object) -> None:
            self.stopping.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def run(self, *, until_idle: bool = False, until: Callable[[], bool] | None = None) -> WorkerStats:
        # The executors now, not during the first step a user waits on.
        import statewright.executors.agents
        import statewright.executors.checks
        import statewright.executors.code  # noqa: F401

        heartbeat = threading.Thread(target=self._heartbeat, daemon=True)
        committer = threading.Thread(target=self._commit_loop, daemon=True)
        threads = [
            threading.Thread(target=self._guarded_loop, args=(until_idle, until), daemon=True)
            for _ in range(self.concurrency - 1)
        ]
        heartbeat.start()
        committer.start()
        for t in threads:
            t.start()
        self._pipeline = True
        handed, self._handed = list(self._handed.values()), {}
        self._hand_over(handed)
        try:
            self._loop(until_idle, until)
        except StatewrightError:
            raise
        except Exception as exc:
            self._fail(_stopped("an executor thread failed", exc), cause=exc)
        finally:
            self._pipeline = False
            self.stopping.set()
            with self._cv:
                self._cv.notify_all()
                self._settled_cv.notify_all()
            for t in threads:
                t.join()
            with self._cv:  # the committer writes what was performed, then ends
                self._executors_done = True
                self._cv.notify_all()
            committer.join()
            heartbeat.join()  # no renewal may touch the store after run() returns
            self._release_all()
        if self._failure is not None:
            raise self._failure from self._failure_cause
        return self.stats

    def run_one(self, task_id: str) -> TaskState:
        """Work one task in the calling thread until it ends, parks at a human step, or is
        cancelled: the pipeline of ``run`` without its executor and committer threads. Each
        outcome's commit claims the task's next step for us, and the state that commit wrote
        is the state the step starts from, so between two steps there is one commit and no
        read. Only this task's commands and timers are claimed; a step another worker holds
        is waited for. Leases are renewed by the process's renewal thread while a step runs."""
        from statewright.runtime.renewals import RENEWALS

        self.stopping.clear()
        RENEWALS.join(self, self._renew_interval())
        try:
            return self._work_one(task_id)
        finally:
            self.stopping.set()
            RENEWALS.leave(self)  # no renewal touches the store after this
            self._release_all()

    def _work_one(self, task_id: str) -> TaskState:
        claim: Claim | None = None
        while True:
            if self._failure is not None:
                failure, self._failure = self._failure, None
                raise failure from self._failure_cause
            if claim is None:
                claim = self._handed.pop(task_id, None) or self._claim_of(task_id)
            if claim is None:
                state = self.engine.state(task_id)
                if state.status in SETTLED:
                    return state
                self._wait_for(task_id)
                continue
            with self._held_lock:
                self._held[claim.command_id] = claim
            try:
                report = self._perform_held(claim)
            except StoreError:
                raise
            except Exception as exc:
                report = self._handling_failed(claim, exc)
            if report is None:  # acknowledged, or given back to be retried later
                self._unhold(claim.command_id, claim.token)
                claim = None
                continue
            claim_for = self._claim_for()
            wake, gates_of = self._ending([claim.command_id])  # told in the outcome's commit, as ``_commit`` does
            try:
                res = self.engine.apply_many([report], claim_for=claim_for, wake=wake)[0]
            except StoreError:
                raise
            except Exception:
                res = self._commit_alone(report, claim_for)
                if wake is not None:
                    self.store.wake(wake.gates, wake.now_ms, wake.count)
            self._unhold(claim.command_id, claim.token, wake=False)
            claim = None
            if isinstance(res, IllegalEventError):
                assert report.complete is not None
                self._ack_refused(*report.complete, gates_of.get(report.complete[0]))
                continue
            if isinstance(res, StaleLeaseError):
                log.warning("lease on %s was lost; the report was refused", report.complete)
                continue
            crash_point("after_append")
            self.stats.commands += 1
            if res.claimed is not None:
                self._chained[res.claimed.command_id] = res.state
                claim = res.claimed
            elif report.task_id == task_id and res.state.status in SETTLED:
                return res.state

    def _claim_of(self, task_id: str) -> Claim | None:
        """The task's next due command, claimed for us; else the command a due timer of the
        task starts; else one of a live child task's (a map step waits on its children)."""
        claim = self._claim_own(task_id)
        if claim is not None:
            return claim
        for child in self.engine.state(task_id).children:
            if child.live:
                claim = self._claim_of(child.task_id)
                if claim is not None:
                    return claim
        return None

    def _claim_own(self, task_id: str) -> Claim | None:
        now = self.clock.now_ms()
        claims = self.store.claim(self.worker_id, now, self.lease_ms, 1, task_id=task_id)
        if claims:
            self._note_gated(claims)
            return claims[0]
        for t in self.store.claim_timers(self.worker_id, now, self.lease_ms, 1, task_id=task_id):
            ev = TimerFired(event_id=f"{t.timer_id}:fired", at_ms=now, timer_id=t.timer_id)
            try:
                applied = self.engine.apply(task_id, ev, complete_timer=(t.timer_id, t.token),
                                            claim_for=self._claim_for())
            except (IllegalEventError, TaskNotFoundError):
                self.store.drop_timer(t.timer_id, t.token)
                continue
            except StaleLeaseError:
                continue
            self.stats.timers += 1
            if applied.claimed is not None:
                self._chained[applied.claimed.command_id] = applied.state
                return applied.claimed
        return None

    def _wait_for(self, task_id: str) -> None:
        """Nothing of the task is claimable now: sleep until its next command or timer is due
        (a timer of a wait step, a retry's backoff, or the lease of another worker's claim)."""
        due = self.store.next_due_ms(task_id=task_id)
        gap = self.idle_poll_seconds if due is None else (due - self.clock.now_ms()) / 1000
        self.clock.sleep(max(0.0, min(gap, IDLE_WAIT_MAX_SECONDS)), self.stopping)

    def _guarded_loop(self, until_idle: bool, until: Callable[[], bool] | None) -> None:
        """An extra thread's loop: a lost store (or any error outside one command's handling)
        stops the whole worker, and run() re-raises."""
        try:
            self._loop(until_idle, until)
        except StoreError as exc:
            self._fail(exc)
        except Exception as exc:
            self._fail(_stopped("an executor thread failed", exc), cause=exc)

    def _fail(self, exc: StatewrightError, *, cause: BaseException | None = None) -> None:
        if self._failure is None:
            self._failure, self._failure_cause = exc, cause
        self.stopping.set()
        with self._cv:
            self._cv.notify_all()
            self._settled_cv.notify_all()

    def _loop(self, until_idle: bool, until: Callable[[], bool] | None) -> None:
        while not self.stopping.is_set():
            if until is not None and until():
                self.stopping.set()
                return
            if time.monotonic() >= self._timers_due:  # a busy worker still fires due timers
                self._fire_timers()
            claim = self._take()
            if claim is not None:
                self._perform(claim)
            elif not self._find_work():
                self._settle(until_idle)

    def _take(self) -> Claim | None:
        """The next command claimed for us, marked busy."""
        with self._cv:
            if not self._ready:
                return None
            self._busy += 1
            claim = self._ready.popleft()
            self._ready_since.pop(claim.command_id, None)
            return claim

    def _find_work(self) -> bool:
        """Fire due timers and claim new commands, unless enough outcomes are pending (their
        commits claim the next commands) or a claim just came back short. Returns whether
        anything became ready."""
        with self._cv:
            in_flight = self._pending + self._busy
            if in_flight and (in_flight >= self._prefetch() or time.monotonic() < self._fresh_after):
                return False
            self._busy += 1
            self._claimed_at = self._commits
        try:
            fired = self._fire_timers()
            if self.stopping.is_set():
                return fired
            limit = max(1, self._prefetch() - in_flight)
            claims = self.store.claim(self.worker_id, self.clock.now_ms(), self.lease_ms, limit)
            self._note_gated(claims)
            if len(claims) < limit:
                self._fresh_after = time.monotonic() + self.idle_poll_seconds
            self._read_states(claims)
            self._hand_over(claims)
            return fired or bool(claims)
        finally:
            with self._cv:
                self._busy -= 1
                self._cv.notify_all()  # a commit gathering outcomes waits for this claim to end

    def _settle(self, until_idle: bool) -> None:
        """Nothing to start: wait for the committer while outcomes are pending; otherwise
        stop (``until_idle``) or wait for new work."""
        with self._cv:
            if self._ready:
                return
            if self._pending or self._busy:
                self._cv.wait(IDLE_POLL_SECONDS)
                return
            if until_idle and self._claimed_at != self._commits:
                return  # a commit since the last claim may have made work due (a woken waiter)
            if until_idle:
                self.stopping.set()
                self._cv.notify_all()
                return
        self._wait_idle()

    def _prefetch(self) -> int:
        """How many commands to hold at once: enough for every executor, and, for quick
        steps, enough to fill a commit, but never more than about PREFETCH_SECONDS of work,
        so slow steps are not hoarded while other workers idle."""
        est = self._step_seconds
        n = 1 if est is None else int(PREFETCH_SECONDS / max(est, 1e-6))
        return max(self.concurrency, min(self.batch, n))

    def _read_states(self, claims: list[Claim]) -> None:
        """The states of newly claimed steps' tasks, in one read (not one per task)."""
        steps = [c for c in claims if c.type in ("RunStep", "RunCheck")]
        if len(steps) < 2:
            return
        try:
            states = self.engine.states([c.task_id for c in steps])
        except StoreError:
            raise
        except Exception:  # a task whose state cannot be read: each command reads its own
            return
        for c in steps:
            if c.task_id in states:
                self._chained[c.command_id] = states[c.task_id]

    def _hand_over(self, claims: list[Claim]) -> None:
        """Claims of ours join the ready queue (held: the heartbeat renews their leases)."""
        if not claims:
            return
        with self._held_lock:
            for c in claims:
                self._held[c.command_id] = c
        now = time.monotonic()
        with self._cv:
            self._ready.extend(claims)
            for c in claims:
                self._ready_since[c.command_id] = now
            self._cv.notify_all()
            self._wake.set()
            idle = self._idle
        if idle:
            self.store.interrupt_waits()

    def _wait_idle(self) -> None:
        """Idle: wait until work is handed to us (``_hand_over`` sets ``_wake``), we stop, or
        new work may be due. PostgreSQL wakes us by LISTEN/NOTIFY; otherwise poll briefly."""
        with self._cv:
            self._wake.clear()  # under _cv: a hand-over from now on sets it again
            if self._ready or self.stopping.is_set():
                return
            self._idle += 1
        try:
            if isinstance(self.clock, SystemClock) and self.store.announces_work:
                self.store.wait_for_work(self._idle_wait(IDLE_WAIT_MAX_SECONDS), self._wake)
            else:
                self.clock.sleep(self._idle_wait(self.idle_poll_seconds), self._wake)
        finally:
            with self._cv:
                self._idle -= 1

    def _idle_wait(self, cap: float) -> float:
        due = self.store.next_due_ms()
        if due is None:
            return cap
        gap = (due - self.clock.now_ms()) / 1000
        return max(0.0, min(cap, gap)) if gap > 0 else 0.0

    # --- timers ------------------------------------------------------------------------
    def _fire_timers(self) -> bool:
        self._timers_due = time.monotonic() + TIMER_CHECK_SECONDS
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
            except StoreError:
                raise
            except Exception as exc:  # the timer stays leased: it fires again when the lease ends
                from statewright.runtime.screen import describe

                log.warning("task %s: timer %s could not fire: %s", t.task_id, t.timer_id, describe(exc))
                continue
            with self._cv:
                self.stats.timers += 1
            if applied.claimed is not None:
                self._chained[applied.claimed.command_id] = applied.state
                self._hand_over([applied.claimed])
            self._note_settled(t.task_id, applied.state)
        return bool(timers)

    # --- commands ----------------------------------------------------------------------
    def _claim_for(self) -> tuple[str, int]:
        return (self.worker_id, self.clock.now_ms() + self.lease_ms)

    # The engine's Holder: a submit or an approval that names this worker claims the task's
    # next step for it in its own commit, and ``run_one`` starts from that claim.
    def claim_for(self) -> tuple[str, int]:
        return self._claim_for()

    def hold(self, task_id: str, claim: Claim, state: TaskState) -> None:
        self._chained[claim.command_id] = state
        if self._pipeline:  # run() is working: the claim joins its ready queue
            self._hand_over([claim])
        else:
            self._handed[task_id] = claim

    def _perform(self, claim: Claim) -> None:
        """Perform one claimed command (the caller marked us busy) and stage its outcome."""
        outcome: Report | None = None
        try:
            if self.stopping.is_set():
                self._unhold(claim.command_id, claim.token)  # not started: _release_all gives it back
                self._hand_back(claim)
                return
            crash_point("after_claim")
            started = time.perf_counter()
            try:
                outcome = self._perform_held(claim)
            except StoreError:
                raise
            except Exception as exc:  # handling this one command failed: fail it, not the worker
                outcome = self._handling_failed(claim, exc)
            took = time.perf_counter() - started
            est = self._step_seconds
            self._step_seconds = took if est is None else (est + took) / 2
        finally:
            lead: list[Report] = []
            with self._cv:
                self._busy -= 1
                if outcome is not None:
                    self._staged.append(outcome)
                    self._pending += 1
                    if self._alone():
                        lead = self._take_batch()
                self._cv.notify_all()
            if outcome is None:
                self._unhold(claim.command_id, claim.token)
        if lead:
            self._commit_guarded(lead)

    def _alone(self) -> bool:
        """With _cv held: whether an outcome just staged is all there is to commit: no commit
        in flight, no other executor performing or claiming, nothing ready to start, and the
        last claim, moments ago, found no more work due. The committer would then commit it
        at once; its executor does so itself instead, and goes on to the next step with no
        hand-over between threads. With work queued, the executor claims it while the
        committer writes, and outcomes share commits."""
        return not (self._committing or self._busy or self._ready or self._executors_done
                    or self.stopping.is_set() or time.monotonic() >= self._fresh_after)

    def _take_batch(self) -> list[Report]:
        """With _cv held: the outcomes of the next commit, which the caller now makes."""
        self._committing = True
        batch = self._staged[: self.batch]
        del self._staged[: len(batch)]
        return batch

    def _hand_back(self, claim: Claim) -> None:
        """Give back a claim that was never started: its delivery does not count."""
        self._chained.pop(claim.command_id, None)
        self.store.release(claim.command_id, claim.token, self.clock.now_ms(), failed=False, started=False)

    def _unhold(self, command_id: str, token: int, *, wake: bool = True) -> None:
        with self._held_lock:
            held = self._held.get(command_id)
            if held is not None and held.token == token:
                del self._held[command_id]
            gates = self._gated.pop(command_id, None)
            if gates:
                self._ended.append(gates)
        if wake:
            self._wake_waiters()

    def _wake_waiters(self) -> None:
        """The slots of the claims under limits that ended are free (with their leases): make
        the commands waiting for them due, in one write for all of them."""
        with self._held_lock:
            ended, self._ended = self._ended, []
        if ended:
            self.store.wake(sorted({g for gs in ended for g in gs}), self.clock.now_ms(), len(ended))

    def _ending(self, command_ids: list[str]) -> tuple[Wake | None, dict[str, tuple[str, ...]]]:
        """What the commit of the outcomes of ``command_ids`` frees: their claims' slots and
        those of claims that ended before it unwoken, told in that commit (one write less);
        and the gates of each of ``command_ids`` that held slots, for an outcome refused."""
        with self._held_lock:
            ended, self._ended = self._ended, []
            gates_of = {c: gates for c in command_ids if (gates := self._gated.pop(c, None))}
        ended += gates_of.values()
        if not ended:
            return None, gates_of
        return Wake(tuple(sorted({g for gs in ended for g in gs})), self.clock.now_ms(), len(ended)), gates_of

    def _ack_refused(self, command_id: str, token: int, gates: tuple[str, ...] | None) -> None:
        """Ack a claim whose outcome was refused (its task moved on), telling the end of its
        slots in the same write. The commit that refused it told them too, but while this
        claim still held them: a waiter woken then may have been given back to wait again."""
        self.store.ack(command_id, token, wake=Wake(gates, self.clock.now_ms(), 1) if gates else None)

    def _note_gated(self, claims: list[Claim]) -> None:
        """Remember which claims hold a slot, to wake a waiter when each ends."""
        gated = [c for c in claims if c.gates]
        if gated:
            with self._held_lock:
                for c in gated:
                    self._gated[c.command_id] = c.gates

    def _count_usage(self, claim: Claim, event: Event) -> None:
        """What a step under a token rate or a tenant budget used, counted against them."""
        cost = getattr(event, "cost", None) or {}
        tokens = int(cost.get("tokens_in", 0) or 0) + int(cost.get("tokens_out", 0) or 0)
        money = float(cost.get("money_usd", 0) or 0)
        if tokens > 0 or money > 0:
            self.store.record_usage(claim.command_id, claim.tenant, claim.gates, tokens, money, self.clock.now_ms())

    def _perform_held(self, claim: Claim) -> Report | None:
        body = claim.body
        result_id = f"{claim.command_id}:result"
        chained = self._chained.pop(claim.command_id, None)
        if claim.deliveries > 1 and self.store.has_event(result_id):
            self.store.ack(claim.command_id, claim.token)  # outcome already recorded
            return None
        if claim.type == "Notify":
            self._notify(claim, result_id)
            return None
        if claim.type == "SyncLabels":  # the task's labels on GitHub: a projection, never its state
            self._sync_labels(claim)
            return None
        if claim.type in self.handlers or claim.type in LOOP_RUN_COMMANDS:
            self._handle(claim)
            return None
        if claim.type == "RequestApproval":
            log.info(
                "task %s waits for approval at %s (role %s, proposal %s)",
                claim.task_id, body.get("step"), body.get("role"), body.get("proposal_hash"),
            )
            self.store.ack(claim.command_id, claim.token)
            with self._cv:
                self.stats.commands += 1
            return None
        try:
            state = chained if chained is not None else self.engine.state(claim.task_id)
            step = state.workflow.step(str(body["step"]))
        except (TaskNotFoundError, KeyError):
            self.store.ack(claim.command_id, claim.token)
            return None
        lost = claim.deliveries - 1 - claim.failures  # earlier starts that reported nothing
        if lost >= (step.retry.max_deliveries or self.max_deliveries):
            return self._reduce(claim, state, step, self._never_reported(claim, lost))
        crash_point("before_effect")
        started = time.monotonic()
        _log_claim(claim)
        event: Event | None = (
            self._capture(claim, state, step, result_id) if claim.type == "CaptureArtifacts"
            else self._approval_void(claim, state, step, result_id)
        )
        if event is None and claim.type == "RunStep" and step.remote is not None:
            self._park(claim, step)
            _log_outcome(claim, f"parked for a remote agent on queue {step.remote.queue!r}", time.monotonic() - started)
            return None
        if event is None:
            try:
                event = self._execute(claim, state, step, result_id)
            except (Exception, SystemExit) as exc:  # transient -> retry later; else a step failure
                event = self._on_error(claim, step, exc, result_id)  # (a step's code may call sys.exit)
        if event is None:
            _log_outcome(claim, "given back to retry later", time.monotonic() - started)
            return None
        crash_point("after_effect")
        if claim.gates:
            self._count_usage(claim, event)
        report = self._reduce(claim, state, step, event)
        _log_outcome(claim, _outcome_of(report.event), time.monotonic() - started)
        return report

    def _handle(self, claim: Claim) -> None:
        """Perform a command that is not a task's with its handler, then ack it; a failure of
        the handler is logged (the command is done: a loop run left unfinished resumes on its
        next start). Without a handler the command waits for a worker that has one."""
        handler = self.handlers.get(claim.type)
        if handler is None:
            log.warning("command %s (%s) of %s needs a worker started by 'statewright worker'; given back",
                        claim.command_id, claim.type, claim.task_id)
            self.store.release(claim.command_id, claim.token, self.clock.now_ms() + self.lease_ms, failed=False,
                               started=False)
            return
        log.info("%s: %s started", claim.task_id, claim.type, extra={"command": claim.type, "event": "started"})
        started = time.monotonic()
        try:
            handler(claim.body)
        except Exception as exc:
            log.warning("command %s (%s) of %s failed: %s: %s", claim.command_id, claim.type, claim.task_id,
                        type(exc).__name__, exc)
        self.store.ack(claim.command_id, claim.token)
        log.info("%s: %s ended in %.2f s", claim.task_id, claim.type, time.monotonic() - started,
                 extra={"command": claim.type, "event": "ended"})
        with self._cv:
            self.stats.commands += 1

    def _notify(self, claim: Claim, result_id: str) -> None:
        """Send one notification and record how it ended. A failure worth another try gives
        the command back for a backoff (``Notifier.retry``); when the tries are used up, or
        another try cannot help, it is recorded as given up. The task is never failed."""
        from statewright.definition.notify import target_from_dict
        from statewright.runtime import notify
        from statewright.runtime.screen import describe

        body = claim.body
        tries = claim.failures + 1
        error: str | None = None
        detail = ""
        try:
            shown = target_from_dict(body.get("target") or {}).describe()
        except ValueError:
            shown = "an unknown target"
        try:
            moved = self._moved_on(claim)
            if moved:
                error, detail = "task_moved_on", moved
            else:
                self.notifier.send(claim.task_id, body)
                crash_point("after_notify")
        except notify.Retry as exc:
            if tries < self.notifier.retry.max_attempts:
                delay = self.notifier.retry.backoff_seconds(tries, self.rng.random())
                why = self._redactor.text(str(exc))
                log.warning("task %s: %s notification to %s not sent (%s); try %d again in %.0f s", claim.task_id,
                            body.get("event"), shown, why, tries + 1, delay)
                with self._cv:
                    self.stats.retries += 1
                self.store.release(claim.command_id, claim.token, self.clock.now_ms() + int(delay * 1000),
                                   failed=True, error=why)
                return
            error, detail = "retries_exhausted", f"{exc} (after {tries} tries)"
        except notify.GiveUp as exc:
            error, detail = exc.reason, str(exc)
        except Exception as exc:  # a poisoned notification ends as given up, never stops the worker
            error, detail = "notify_error", describe(exc)
        event = NotificationSent(
            event_id=result_id, at_ms=self.clock.now_ms(), command_id=claim.command_id,
            step=str(body.get("step", "")), attempt=int(body.get("attempt") or 0), event=str(body.get("event", "")),
            target=shown, idempotency_key=str(body.get("idempotency_key") or claim.command_id),
            delivered=error is None, error=error, detail=self._redactor.text(detail)[:2000], tries=tries,
        )
        try:
            self.engine.apply(claim.task_id, event, complete=(claim.command_id, claim.token))
        except (IllegalEventError, TaskNotFoundError):
            self.store.ack(claim.command_id, claim.token)
        except StaleLeaseError:
            return
        if error is None:
            log.info("task %s: %s notification sent to %s", claim.task_id, event.event, shown)
        else:
            log.warning("task %s: %s notification to %s given up (%s): %s", claim.task_id, event.event, shown,
                        error, event.detail)
        with self._cv:
            self.stats.commands += 1

    def _moved_on(self, claim: Claim) -> str:
        """Why a notification no longer applies (its task left the step it is about, or is
        no longer halted), or "" when it does."""
        state = self.engine.state(claim.task_id)
        event = claim.body.get("event")
        if event == "halted":
            return "" if state.status is TaskStatus.HALTED else f"the task is {state.status.value} now"
        cur = state.current
        if cur is None or (cur.step, cur.attempt) != (claim.body.get("step"), claim.body.get("attempt")):
            return f"the task left step {claim.body.get('step')!r} (it is {state.status.value} now)"
        shown = (claim.body.get("facts") or {}).get("proposal_hash")
        if event == "approval" and shown != cur.proposal_hash:
            return "the proposal was built again (new evidence); its own notification says so"
        return ""

    def _park(self, claim: Claim, step: Step) -> None:
        """A remote agent's attempt: nothing runs here. The command leaves the outbox for the
        step's queue (runtime/remote.py), where the step's timeout starts counting."""
        remote = step.remote
        if remote is None:
            return
        now = self.clock.now_ms()
        due = now + int(step.timeout_seconds * 1000) if step.timeout_seconds is not None else None
        try:
            self.store.park_remote(claim.command_id, claim.token, claim.task_id, remote.queue, claim.body, now, due,
                                   int(remote.heartbeat_seconds * 1000))
        except StaleLeaseError:
            log.warning("lease on %s was lost; another worker parks it", claim.command_id)
            return
        with self._cv:
            self.stats.commands += 1

    def _sync_labels(self, claim: Claim) -> None:
        """Make the task's GitHub labels show its state (``integrations.github.labels``), with
        the worker's own GITHUB_TOKEN. A failure worth another try gives the command back for
        a backoff; any other is logged: labels never fail or stop a task."""
        crash_point("before_effect")
        try:
            from statewright.integrations.github.client import GitHub, GitHubError
            from statewright.integrations.github.labels import sync
        except ImportError as exc:
            log.warning("task %s: labels not synced: %s (install statewright[github])", claim.task_id, exc)
            self.store.ack(claim.command_id, claim.token)
            return
        tries = claim.failures + 1
        try:
            with GitHub() as client:
                done = sync(lambda: self.engine.state(claim.task_id), client)
            log.info("task %s: labels synced (added %s, removed %s)", claim.task_id, done.added, done.removed)
        except GitHubError as exc:
            why = self._redactor.text(str(exc))
            if exc.retryable and tries < LABEL_TRIES:
                delay = RetryPolicy().backoff_seconds(tries, self.rng.random())
                log.warning("task %s: labels not synced (%s); try %d again in %.0f s", claim.task_id, why,
                            tries + 1, delay)
                self.store.release(claim.command_id, claim.token, self.clock.now_ms() + int(delay * 1000),
                                   failed=True, error=why)
                return
            log.warning("task %s: labels not synced, given up: %s", claim.task_id, why)
        except TaskNotFoundError:
            pass
        except StoreError:
            raise
        except Exception as exc:  # poison (a GitHub answer no one expected): logged, never the task's failure
            from statewright.runtime.screen import describe

            log.warning("task %s: labels not synced: %s", claim.task_id, self._redactor.text(describe(exc)))
        crash_point("after_effect")
        self.store.ack(claim.command_id, claim.token)
        with self._cv:
            self.stats.commands += 1

    def _reduce(self, claim: Claim, state: TaskState, step: Step, event: Event) -> Report:
        """The screened and redacted outcome, reduced; an outcome the reducer or the encoder
        cannot take becomes the attempt's ``handling_error`` failure. Screening comes first:
        it bounds the depth and size of what the redactor then walks."""
        from statewright.runtime import screen

        redactor = self._redactor_for(step)
        complete = (claim.command_id, claim.token)
        if isinstance(event, AttemptReported | CheckReported) and (claim.deliveries > 1 or claim.failures):
            event = replace(event, deliveries=claim.deliveries, retries=claim.failures)  # shown as such
        event = redactor.record(screen.screen(event, step.result_limit_bytes))  # before it is stored anywhere
        try:
            return self.engine.reduce(Report(claim.task_id, event, state, complete))
        except StoreError:
            raise
        except Exception as exc:
            why = redactor.text(screen.describe(exc))
            failed = screen.failed_instead(event, f"reducing the outcome failed ({why})")
            if failed is None:
                raise
            log.warning("task %s: command %s: %s", claim.task_id, claim.command_id, why)
            return self.engine.reduce(Report(claim.task_id, failed, state, complete))

    def _never_reported(self, claim: Claim, lost: int) -> Event:
        """A command every worker that started it died with (the step ended the process,
        it was killed, it ran out of memory): not performed again, its attempt (or check)
        fails with ``worker_died`` and routes like any failure."""
        from statewright.executors.base import Reason
        from statewright.runtime import screen

        times = "once" if lost == 1 else f"{lost} times"
        detail = (f"delivered {times}; each worker that ran it stopped before reporting "
                  "(killed, out of memory, or the step ended the process)")
        log.warning("task %s: command %s %s; it fails with %s", claim.task_id, claim.command_id, detail,
                    Reason.WORKER_DIED.value)
        return screen.failed_command(claim.type, claim.command_id, claim.body,
                                     self.clock.now_ms(), f"worker:{self.worker_id}", detail,
                                     reason=Reason.WORKER_DIED)

    def _handling_failed(self, claim: Claim, exc: Exception) -> Report | None:
        """An exception while handling ``claim`` (outside its executor): the attempt fails
        with ``handling_error`` and routes. When not even that failure can be built, the
        command is given back for UNHANDLED_DELAY_SECONDS, so it is never retried in a loop."""
        from statewright.runtime import screen

        why = screen.describe(exc)
        log.warning("task %s: handling command %s failed: %s", claim.task_id, claim.command_id, why)
        now = self.clock.now_ms()
        failed = screen.failed_command(claim.type, claim.command_id, claim.body, now,
                                       f"worker:{self.worker_id}", f"handling the command failed ({why})")
        try:
            return self.engine.reduce(Report(claim.task_id, failed, self.engine.state(claim.task_id),
                                             (claim.command_id, claim.token)))
        except StoreError:
            raise
        except Exception as again:
            log.warning("task %s: command %s: no failure could be recorded (%s); retrying it in %.0f s",
                        claim.task_id, claim.command_id, screen.describe(again), UNHANDLED_DELAY_SECONDS)
            self._chained.pop(claim.command_id, None)
            self.store.release(claim.command_id, claim.token, now + int(UNHANDLED_DELAY_SECONDS * 1000),
                               failed=True, error=why)
            return None

    # --- the committer -----------------------------------------------------------------
    def _commit_loop(self) -> None:
        while True:
            with self._cv:
                while self._committing or (not self._staged and not self._executors_done):
                    self._cv.wait()
                if not self._staged:
                    return
                self._committing = True
                self._gather()
                batch = self._take_batch()
            if not self._commit_guarded(batch):
                return

    def _commit_guarded(self, batch: list[Report]) -> bool:
        """Commit ``batch`` (this thread holds the right to commit) and give that right back.
        When the store is lost or the commit cannot be made, the worker stops: returns False."""
        try:
            self._commit(batch)
            return True
        except StoreError as exc:
            log.error("lost the store (%s); stopping: held leases will expire", exc)
            self._stop_committing(exc)
        except Exception as exc:  # outcomes cannot be recorded: stop, releasing our leases
            self._stop_committing(_stopped("the committer could not record outcomes", exc), cause=exc)
        finally:
            with self._cv:
                self._committing = False
                self._cv.notify_all()
        return False

    def _stop_committing(self, exc: StatewrightError, *, cause: BaseException | None = None) -> None:
        with self._cv:
            self._staged.clear()
            self._pending = 0
        self._fail(exc, cause=cause)

    def _gather(self) -> None:
        """With _cv held and an outcome staged: while executors are still producing outcomes
        (performing, or with commands ready to start), wait up to COMMIT_DELAY_SECONDS for
        them to join this commit, as PostgreSQL's commit_delay does. A lone outcome, with
        nothing else under way, is committed at once; one staged while an executor claims is
        committed when the claim ends with nothing claimed (``_find_work`` notifies)."""
        deadline = time.monotonic() + COMMIT_DELAY_SECONDS
        while (len(self._staged) < self.batch and (self._busy or self._ready)
               and not self._executors_done and not self.stopping.is_set()):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._cv.wait(left)

    def _commit(self, batch: list[Report]) -> None:
        claim_for = None if self.stopping.is_set() else self._claim_for()
        ids = [r.complete[0] for r in batch if r.complete is not None]
        wake, gates_of = self._ending(ids)
        try:
            results = self.engine.apply_many(batch, claim_for=claim_for, wake=wake)
        except StoreError:
            raise
        except Exception:  # one outcome spoils the group: commit each on its own
            results = [self._commit_alone(report, claim_for) for report in batch]
            if wake is not None:
                self.store.wake(wake.gates, wake.now_ms, wake.count)
        nexts: list[Claim] = []
        done = stale = 0
        for report, res in zip(batch, results, strict=True):
            assert report.complete is not None  # every staged report completes its command
            command_id, token = report.complete
            if isinstance(res, IllegalEventError):
                stale += 1
                self._ack_refused(command_id, token, gates_of.get(command_id))
            elif isinstance(res, StaleLeaseError):
                stale += 1
                log.warning("lease on %s was lost; the report was refused", command_id)
            else:
                crash_point("after_append")
                done += 1
                if res.claimed is not None:
                    self._chained[res.claimed.command_id] = res.state
                    nexts.append(res.claimed)
            # Let go of the command before telling a waiter: one that finds it not held reads
            # the task as this commit left it; one that finds it held is told just below
            self._unhold(command_id, token, wake=False)
            if not isinstance(res, Exception):
                self._note_settled(report.task_id, res.state)  # its waiter wakes now, whatever was claimed
        self._wake_waiters()  # once for the whole batch
        self._hand_over(nexts)
        with self._cv:
            self.stats.commands += done
            self.stats.stale += stale
            self._pending -= len(batch)
            self._commits += 1
            self._cv.notify_all()

    def wait_for(self, task_id: str, timeout: float | None = None) -> TaskState:
        """While ``run`` works in another thread: wait until this worker's commit leaves the
        task ended or parked at a human step (or, as it may have been settled elsewhere, until
        its stored state says so when asked) and return that state. TimeoutError after
        ``timeout`` seconds."""
        with self._cv:
            self._awaited.add(task_id)
        try:
            if not self._handed_or_held(task_id):  # else our commit says when it settles
                state = self.engine.state(task_id)
                if state.status in SETTLED and not self._handed_or_held(task_id):
                    return state
            deadline = None if timeout is None else time.monotonic() + timeout
            look_again = time.monotonic() + 1.0
            with self._cv:
                while task_id not in self._settled:
                    now = time.monotonic()
                    if deadline is not None and now >= deadline:
                        raise TimeoutError(f"task {task_id} did not settle within {timeout} s")
                    if self._failure is not None or (self.stopping.is_set() and not self._pipeline):
                        return self.engine.state(task_id)
                    if now >= look_again:  # settled by another worker, or by an operator
                        look_again = now + 1.0
                        state = self.engine.state(task_id)
                        if state.status in SETTLED and not self._handed_or_held(task_id):
                            return state
                    self._settled_cv.wait(min(1.0, deadline - now) if deadline is not None else 1.0)
                return self._settled.pop(task_id)
        finally:
            with self._cv:
                self._awaited.discard(task_id)
                self._settled.pop(task_id, None)

    def _note_settled(self, task_id: str, state: TaskState) -> None:
        if state.status in SETTLED and task_id in self._awaited:
            with self._cv:
                self._settled[task_id] = state
                self._settled_cv.notify_all()

    def _handed_or_held(self, task_id: str) -> bool:
        """Whether a command of the task is ours: handed to us, ready, being performed, or
        its outcome waiting for its commit (which then says when the task settles)."""
        with self._cv:
            if task_id in self._handed:
                return True
        with self._held_lock:
            return any(c.task_id == task_id for c in self._held.values())

    def _commit_alone(
        self, report: Report, claim_for: tuple[str, int] | None
    ) -> Applied | IllegalEventError | StaleLeaseError:
        """Commit one outcome; when the store refuses it with anything but a store error, its
        attempt's ``handling_error`` failure is recorded instead. When even that is refused,
        the exception goes on: the committer cannot go on."""
        from statewright.runtime import screen

        try:
            return self.engine.apply_many([report], claim_for=claim_for)[0]
        except StoreError:
            raise
        except Exception as exc:
            why = screen.describe(exc)
            failed = screen.failed_instead(report.event, f"recording the outcome failed ({why})")
            if failed is None:
                raise
        try:
            applied = self.engine.apply(report.task_id, failed, complete=report.complete, claim_for=claim_for,
                                        state=report.state)
        except (IllegalEventError, StaleLeaseError) as refused:
            return refused
        log.warning("task %s: recording an outcome failed (%s); its attempt failed instead", report.task_id, why)
        return applied

    def _context(self, claim: Claim, state: TaskState, step: Step, space: AttemptSpace | None = None) -> Any:
        from statewright.executors._isolation import step_env
        from statewright.executors.base import ExecContext

        resolved = space.path if space is not None else self._task_dir(state)
        return ExecContext(
            task_id=state.task_id, step=step.id, attempt=int(claim.body.get("attempt", 1)),
            idempotency_key=str(claim.body.get("idempotency_key", claim.command_id)),
            workspace=resolved, timeout_seconds=step.timeout_seconds,
            env=step_env(step.env, step.secrets, os.environ, step=step.id),
            deliveries=claim.deliveries, input=_read_only(state.input),
            results=MappingProxyType({k: _read_only(v) for k, v in state.results.items()}),
        )

    def _task_dir(self, state: TaskState) -> Path:
        """The task's ``workspace`` directory, or its own directory under the root."""
        ws = state.input.get("workspace") if isinstance(state.input, Mapping) else None
        if ws:
            return self._workspace((str(ws),), Path(str(ws)))
        # under the root, resolved once: a task's own directory needs no realpath
        root = self._workspace((self.engine.workspace_root,), self.engine.workspace_root)
        return self._workspace((self.engine.workspace_root, state.task_id), root / state.task_id, resolve=False)

    def _redactor_for(self, step: Step) -> Redactor:
        """The worker's redactor, knowing also this step's declared secrets and API key."""
        from statewright.executors._isolation import LOG_FILTER

        names = list(step.secrets)
        key_env = (step.agent or {}).get("api_key_env")
        if isinstance(key_env, str):
            names.append(key_env)
        if not names:
            return self._redactor
        cache_key = tuple(names)
        found = self._step_redactors.get(cache_key)
        if found is None:
            values = [os.environ[n] for n in names if n in os.environ]
            found = self._redactor.with_secrets(values)
            LOG_FILTER.know(values)
            if len(self._step_redactors) >= _WORKSPACE_CACHE_SIZE:
                self._step_redactors.clear()
            self._step_redactors[cache_key] = found
        return found

    def _workspace(self, key: tuple[object, ...], path: Path, *, resolve: bool = True) -> Path:
        """The task's workspace directory, made if missing. A resolved path is remembered and
        looked at again (is it still there?) at most every WORKSPACE_RECHECK_SECONDS."""
        now = time.monotonic()
        cached = self._workspaces.get(key)
        if cached is not None and (now < cached[1] or os.path.isdir(cached[0])):
            if now >= cached[1]:
                self._workspaces[key] = (cached[0], now + WORKSPACE_RECHECK_SECONDS)
            return cached[0]
        path.mkdir(parents=True, exist_ok=True)
        resolved = path.resolve() if resolve else path
        if len(self._workspaces) >= _WORKSPACE_CACHE_SIZE:
            self._workspaces.clear()
        self._workspaces[key] = (resolved, now + WORKSPACE_RECHECK_SECONDS)
        return resolved

    def _execute(self, claim: Claim, state: TaskState, step: Step, result_id: str) -> Event:
        from statewright.runtime import perform

        attempt = int(claim.body.get("attempt", 1))
        if step.kind is StepKind.AI:
            space = workspaces.for_ai_attempt(self.engine.workspace_root, state, step, attempt)
        else:
            space = workspaces.for_check(state, step)
        ctx = self._context(claim, state, step, space)
        return perform.run(claim, step, ctx, space, result_id, self.clock.now_ms)

    def _approval_void(self, claim: Claim, state: TaskState, step: Step, result_id: str) -> Event | None:
        """Approvals are checked again when approved work is about to run. A step after an
        approval whose approver was removed, lost the role or had the token revoked is not
        performed: it is reported as ``approval_revoked``; one after an approved artifact
        changed, as ``artifact_changed``. Either way the task halts at the approval."""
        if claim.type not in ("RunStep", "RunCheck") or not state.approvals:
            return None
        reason, why = APPROVAL_REVOKED, None
        if claim.type == "RunStep":
            why = approval_problem(self.store, state, step.id)
        if why is None:
            approved = artifacts.approved_artifacts(state, step.id)
            changed = artifacts.changes(self._work_dir(state, step), approved, state.input) if approved else []
            reason, why = ARTIFACT_CHANGED, "; ".join(changed) or None
        if why is None:
            return None
        log.warning("task %s: %s", claim.task_id, why)
        body, now = claim.body, self.clock.now_ms()
        if claim.type == "RunCheck":
            return CheckReported(
                event_id=result_id, at_ms=now, command_id=claim.command_id, step=step.id,
                attempt=int(body.get("attempt", 1)), check_number=int(body.get("check_number", 1)),
                passed=False, error=reason, detail=why,
            )
        return AttemptReported(
            event_id=result_id, at_ms=now, command_id=claim.command_id, step=step.id,
            attempt=int(body.get("attempt", 1)), actor=f"worker:{self.worker_id}", ok=False,
            error=reason, detail=why,
        )

    def _capture(self, claim: Claim, state: TaskState, step: Step, result_id: str) -> Event:
        """Read a human step's declared artifacts for its proposal."""
        body = claim.body
        common: dict[str, Any] = {
            "event_id": result_id, "command_id": claim.command_id, "step": step.id,
            "attempt": int(body.get("attempt", 1)),
        }
        try:
            found = artifacts.capture(self._work_dir(state, step), step.artifacts, state.input)
        except artifacts.ArtifactError as exc:
            return ArtifactsCaptured(**common, at_ms=self.clock.now_ms(), error=exc.reason, detail=str(exc))
        return ArtifactsCaptured(**common, at_ms=self.clock.now_ms(), artifacts=found)

    def _work_dir(self, state: TaskState, step: Step) -> Path:
        """Where the task's work is: the worktree of its latest passed ai attempt (a task
        with a ``repo``), else its workspace directory."""
        space = workspaces.for_check(state, step)
        return space.path if space is not None else self._task_dir(state)

    def _on_error(self, claim: Claim, step: Step, exc: BaseException, result_id: str) -> Event | None:
        policy = step.retry
        name = type(exc).__name__
        failures = claim.failures + 1
        retryable = isinstance(exc, TransientError) and name not in policy.non_retryable
        if retryable and failures < policy.max_attempts:
            delay = policy.backoff_seconds(failures, self.rng.random())
            with self._cv:
                self.stats.retries += 1
            from statewright.runtime.screen import describe

            self.store.release(
                claim.command_id, claim.token, self.clock.now_ms() + int(delay * 1000),
                failed=True, error=self._redactor_for(step).text(describe(exc)),
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
        """Renew the leases we hold (every third of a lease), and give back commands that
        have waited too long for an executor."""
        interval = self._renew_interval()
        renew_at = time.monotonic() + interval
        while not self.stopping.wait(min(interval, READY_HOLD_SECONDS / 2)):
            try:
                self._give_back_waiting()
            except StoreError as exc:
                self._lost_store(exc)
                return
            if time.monotonic() < renew_at:
                continue
            renew_at = time.monotonic() + interval
            if not self.renew_held():
                return

    def _renew_interval(self) -> float:
        return max(0.05, self.lease_ms / 3000)

    def renew_held(self) -> bool:
        """Renew every lease we hold; False when the store is lost (the worker then stops)."""
        with self._held_lock:
            held = [(c.command_id, c.token) for c in self._held.values()]
        try:
            for cid, token in held:
                self.store.renew(cid, token, self.clock.now_ms(), self.lease_ms)
        except StoreError as exc:
            self._lost_store(exc)
            return False
        return True

    def _lost_store(self, exc: StoreError) -> None:
        log.error("lost the store (%s); stopping: held leases will expire", exc)
        self._fail(exc)

    def _give_back_waiting(self, now: float | None = None) -> int:
        """Release the commands that have waited in our ready queue for more than
        READY_HOLD_SECONDS (every executor was busy with slow steps), so idle workers can
        take them. Returns how many were given back."""
        now = time.monotonic() if now is None else now
        with self._cv:
            old = [c for c in self._ready if now - self._ready_since.get(c.command_id, now) > READY_HOLD_SECONDS]
            if not old:
                return 0
            gone = {c.command_id for c in old}
            self._ready = deque(c for c in self._ready if c.command_id not in gone)
            for cid in gone:
                self._ready_since.pop(cid, None)
        for c in old:
            self._unhold(c.command_id, c.token)
            self._hand_back(c)
        log.info("gave back %d command(s) that no executor could start within %.1f s", len(old), READY_HOLD_SECONDS)
        return len(old)

    def _release_all(self) -> None:
        """Release every lease still held: a command still waiting in the ready queue was
        never started (its delivery does not count); any other was (its outcome was lost
        with the committer)."""
        with self._cv:
            unstarted = {c.command_id for c in self._ready}
        with self._held_lock:
            held = [(c.command_id, c.token) for c in self._held.values()]
        try:
            for cid, token in held:
                self.store.release(cid, token, self.clock.now_ms(), failed=False, started=cid not in unstarted)
        except StoreError:
            return  # the store is gone; the leases expire on their own


class _Stopping(threading.Event):
    """``Worker.stopping``: setting it also sets the worker's wake event, so an idle wait
    ends at once however the stop was asked for (a signal handler, ``until``, a caller)."""

    def __init__(self, wake: threading.Event) -> None:
        super().__init__()
        self._also = wake

    def set(self) -> None:
        super().set()
        self._also.set()


def _log_claim(claim: Claim) -> None:
    body = claim.body
    again = f", delivery {claim.deliveries}" if claim.deliveries > 1 else ""
    what = f"check {body.get('check_number', 1)} of " if claim.type == "RunCheck" else ""
    log.info("task %s: %s%s #%s started%s", claim.task_id, what, body.get("step"), body.get("attempt"), again,
             extra={"task": claim.task_id, "step": body.get("step"), "attempt": body.get("attempt"),
                    "command": claim.type, "event": "started"})


def _log_outcome(claim: Claim, result: str, seconds: float) -> None:
    body = claim.body
    log.info("task %s: %s #%s %s in %.2f s", claim.task_id, body.get("step"), body.get("attempt"), result, seconds,
             extra={"task": claim.task_id, "step": body.get("step"), "attempt": body.get("attempt"),
                    "command": claim.type, "event": "ended", "result": result, "seconds": round(seconds, 3)})


def _outcome_of(event: Event) -> str:
    """A report's result in a word or two: passed, failed (REASON), check passed, ..."""
    if isinstance(event, AttemptReported):
        return "passed" if event.ok and event.error is None else f"failed ({event.error or 'failed'})"
    if isinstance(event, CheckReported):
        return "check passed" if event.passed else f"check failed ({event.error or event.detail[:60]})"
    if isinstance(event, ArtifactsCaptured):
        return "artifacts read" if event.error is None else f"artifacts not read ({event.error})"
    return event.type


def _read_only(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only view of a deep copy: what a step is given can change nothing in the task."""
    return MappingProxyType(copy.deepcopy(dict(value)) if isinstance(value, Mapping) else {})


def _default_worker_id(worker: Worker) -> str:
    return f"{_host_name()}:{os.getpid()}:{id(worker):x}"


def _host_name() -> str:
    """``socket.gethostname()``: on POSIX the node name ``uname`` gives, read without
    importing socket (a noticeable part of a new process's first task)."""
    if hasattr(os, "uname"):
        return os.uname().nodename
    import socket

    return socket.gethostname()


def _stopped(what: str, exc: BaseException) -> WorkerStoppedError:
    from statewright.runtime.screen import describe

    msg = (f"worker stopped: {what} ({describe(exc)}); its leases were released, so other "
           "workers may take its commands; check the database and run the worker again")
    return WorkerStoppedError(msg)
