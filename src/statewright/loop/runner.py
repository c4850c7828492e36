"""The thin driver of the loop: feed events to the reducer, store each line, perform commands.

One outer-loop process per run (a lock file next to the database enforces it). The
driver's cycle is always the same:

    transition(state, event) -> (state, commands, line)
    store.append(line, state)              # the record is written BEFORE the move
    crash point                            # STATEWRIGHT_LOOP_CRASH_AT=<STATE> (tests)
    perform commands -> the next event

Every start of a process for an unfinished run begins with ``ProcessStarted``, so the
reducer's ``resume()`` counts the restart. The kill switch (the loop file's
``kill_switch.file``, ``statewright loop stop``, SIGTERM or SIGINT) is checked before
every move and writes a clean-stop line; the run resumes from there on the next start.
A source that cannot be read raises SourceError and writes nothing: a crash, counted
on the next start like any other.

Every command the run starts (source, worker, checks, oracles) gets a minimal environment
plus what the loop file declares for it, never this process's (``loop._isolation``); a
declared secret this process lacks refuses the run before anything is written. Every event
is redacted before the reducer sees it (known secrets become ``[redacted]``), so no line,
state, pass record or brief holds one; so are the items a source lists.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import json
import os
import signal
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from types import FrameType
from typing import Any

from statewright._crash import LOOP_CRASH_ENV, loop_crash_point
from statewright._errors import IllegalEventError, InputError, VersionConflictError
from statewright._record import record
from statewright.loop._isolation import loop_redactor, require_secrets
from statewright.loop.definition import LoopDefinition
from statewright.loop.errors import LoopInvariantError, RunHeldError, SourceError
from statewright.loop.oracles import fingerprint_assets, run_check
from statewright.loop.passes import CommandPassRunner, EnginePassRunner, PassResult, PassRunner, PassStatus
from statewright.loop.sources import WorkItem, find_items
from statewright.loop.store import LoopStore, RunRow, new_event_id, record_of
from statewright.machine.loop._moves import entry_commands, pending
from statewright.machine.loop.events import (
    AppendRecord,
    ApprovalGranted,
    ApprovalRejected,
    AwaitPass,
    BriefNeedsPerson,
    BriefReady,
    BuildBrief,
    CheckFinished,
    Command,
    EvaluateGoal,
    Event,
    FindItems,
    GateSleep,
    GateTimedOut,
    GoalEvaluated,
    HoldCleared,
    ItemsFound,
    ItemUnparked,
    KillSwitch,
    LaunchWorker,
    PassEnded,
    PassWaiting,
    ProcessStarted,
    RecordAppended,
    RequestApproval,
    RunChecks,
    StopWorker,
    TriggerArrived,
    WakeRun,
    WorkerNoResult,
    WorkerReturned,
    command_from_dict,
)
from statewright.machine.loop.model import CheckOutcome, CheckResult, LineKind, LoopState, LoopStatus, RecordLine
from statewright.machine.loop.reducer import initial_state, transition
from statewright.runtime.clock import SystemClock
from statewright.runtime.users import Principal, Users
from statewright.store.base import Claim

CRASH_ENV = LOOP_CRASH_ENV
DRIVE_LEASE_SECONDS = 30.0  # a dead driver's run is taken up by a worker this long after it stopped renewing


def now_ms() -> int:
    """Wall time: leases are wall-clock time, whatever clock the run's events are given."""
    return time.time_ns() // 1_000_000


class Lease:
    """The lease of the process driving a run (its ``DriveRun`` row), renewed by a thread until
    given up. ``lost``: a renewal found the lease gone to another (or the row gone with the
    run's end)."""

    def __init__(self, store: LoopStore, claim: Claim, lease_ms: int) -> None:
        self.store, self.claim, self.lease_ms = store, claim, lease_ms
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="statewright-loop-lease", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.lease_ms / 3000):
            if not self.store.store.renew(self.claim.command_id, self.claim.token, now_ms(), self.lease_ms):
                self.lost = True
                return

    def give_up(self) -> None:
        """Stop renewing and free the run: the lease row goes (a run that ended took it already)."""
        self._stop.set()
        self._thread.join()
        self.store.store.ack(self.claim.command_id, self.claim.token)


def system_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@record
class RunOutcome:
    """Where a process left the run: a terminal, or paused at a clean stop. ``waiting_on``
    names the pass's task the run waits on in RUNNING (it waits for a person's approval)."""

    run_id: str
    status: LoopStatus
    paused: str | None
    reason: str
    waiting_on: str = ""

    @property
    def finished(self) -> bool:
        return self.status.is_terminal


class LoopRunner:
    """Drive one loop definition against one store. ``run()`` is one process's work."""

    def __init__(
        self,
        definition: LoopDefinition,
        store: LoopStore,
        *,
        pass_runner: PassRunner | None = None,
        clock: Callable[[], int] = system_clock_ms,
        env: Mapping[str, str] | None = None,
        trigger: str = "manual trigger",
        crash_at: str | None = None,
        install_signal_handlers: bool = False,
        new_run: bool = False,
        resume_run: str | None = None,
        adopt: bool = False,
        lease_seconds: float = DRIVE_LEASE_SECONDS,
    ) -> None:
        self.definition = definition
        self.store = store
        self.clock = clock
        self.env = dict(os.environ if env is None else env)
        self.trigger = trigger
        self.crash_at = crash_at if crash_at is not None else self.env.get(CRASH_ENV) or None
        self.install_signal_handlers = install_signal_handlers
        self.new_run = new_run
        self.resume_run = resume_run  # drive only this run, if it is the loop's newest and unfinished
        self.adopt = adopt  # resume_run's driver died (its lease ran out): take the run up, not only asleep
        self.lease_ms = int(lease_seconds * 1000)
        self._lease: Lease | None = None
        self.pass_runner = pass_runner or default_pass_runner(definition, store, self.env)
        self.redactor = loop_redactor(definition, self.env, [store.url])
        self._signal: str | None = None
        self.worker_id = f"loop-run:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._payloads: dict[str, Mapping[str, Any]] = {}  # the items this process found, by id
        self._extra: dict[str, Any] | None = None  # kept with the next line (payloads, a pass record)
        self._passes: ThreadPoolExecutor | None = None  # a wave's passes run at once, one thread each
        self._inflight: dict[tuple[str, int], Future[Event | None]] = {}

    # ---------------------------------------------------------------- one process

    def run(self) -> RunOutcome:
        require_secrets(self.definition, self.env)
        with _loop_lock(self.store, self.definition.name), self._signals(), self._pass_threads():
            if self.resume_run is not None:
                run = self.store.run(self.resume_run)
                newest = self.store.latest_run(self.definition.name)
                takes_up = run_sleeps(run) or (self.adopt and not run.status.is_terminal and not run.state.clean_stop)
                if not takes_up or newest is None or newest.run_id != run.run_id:
                    # nothing to carry on: it ended, was replaced, stopped, or a process drives it
                    return RunOutcome(run.run_id, run.status, None, run.state.reason)
                refuse_changed_file(run, self.definition)
                return self._drive(run, ProcessStarted(self.clock()))
            run, first = self._open_or_resume()
            return self._drive(run, first)

    def _open_or_resume(self) -> tuple[RunRow, Event]:
        d = self.definition
        newest = self.store.latest_run(d.name)
        now = self.clock()
        if newest is not None and not newest.status.is_terminal and not self.new_run:
            refuse_changed_file(newest, d)
            return newest, ProcessStarted(now)
        if newest is not None and newest.held:
            msg = (
                f"loop {d.name!r}: run {newest.run_id} ended stuck ({newest.state.reason});"
                f" no new run starts until someone clears it: 'statewright loop clear"
                f" {newest.run_id} --reason TEXT' with an operator's token"
            )
            raise RunHeldError(msg, run_id=newest.run_id, loop=d.name)
        config = d.config()
        assets = fingerprint_assets((*d.checks, *d.goal.oracles), d.base_dir)
        run = self.store.create_run(
            loop=d.name,
            definition_path=d.path,
            definition_sha256=d.sha256,
            make_state=lambda run_id, ledger: initial_state(run_id, config, ledger),
            assets=assets,
            at_ms=now,
            owner_pid=os.getpid(),
        )
        loop_crash_point(self.crash_at, LoopStatus.IDLE)
        return run, TriggerArrived(self.trigger, self.clock())

    def _drive(self, run: RunRow, event: Event) -> RunOutcome:
        try:
            return self._drive_leased(run, event)
        finally:
            if self._lease is not None:
                self._lease.give_up()
                self._lease = None

    def _drive_leased(self, run: RunRow, event: Event) -> RunOutcome:
        """Drive the run; the first line this process writes takes the run's lease with it."""
        state, lines = run.state, run.lines
        while True:
            if self._lease is not None and self._lease.lost:
                msg = (f"run {run.run_id}: this process's lease on the run ran out and another process may have"
                       " taken the run up; it stops here (the run carries on where it is)")
                raise InputError(msg)
            stop = None if isinstance(event, ProcessStarted) else self._stop_reason(run.run_id)
            if stop is not None and not state.status.is_terminal:
                event = KillSwitch(stop, self.clock())
            elif _after_its_end(state, event):  # a wave's pass whose task's end another commit recorded
                carried = self._carry_on(run, (state, lines, ()))
                if isinstance(carried, RunOutcome):
                    return carried
                state, lines, event = carried
                continue
            event = self._redacted(event)
            step = transition(state, event)
            if step.line is not None:
                try:
                    self.store.append(
                        run.run_id,
                        expected_lines=lines,
                        line=step.line,
                        state=step.state,
                        event=event,
                        commands=step.commands,
                        extra=self._extra,
                        owner_pid=os.getpid(),
                        drive_for=None if self._lease is not None else (self.worker_id, now_ms() + self.lease_ms),
                    )
                except VersionConflictError:
                    noted = self._noted_only(run.run_id, lines)
                    if noted is not None:  # only note lines came between: the event still applies
                        state, lines = noted.state, noted.lines
                        continue
                    carried = self._carry_on(run, None)
                    if isinstance(carried, RunOutcome):
                        return carried
                    state, lines, event = carried
                    continue
                self._extra = None
                if self._lease is None and self.store.drive is not None:
                    self._lease = Lease(self.store, self.store.drive, self.lease_ms)
                lines += 1
                loop_crash_point(self.crash_at, step.line.next_state)
            state = step.state
            if state.status.is_terminal or (step.line is not None and step.line.kind is LineKind.CLEAN_STOP):
                self._perform_stops(state, step.commands)
                paused = None
                if not state.status.is_terminal and step.line is not None:
                    paused = step.line.event
                waiting = ""
                if isinstance(event, PassWaiting) and state.current is not None:
                    waiting = state.current.task_id
                return RunOutcome(run.run_id, state.status, paused, state.reason, waiting)
            if state.status is LoopStatus.IDLE:
                event = TriggerArrived(self.trigger, self.clock())
                continue
            carried = self._carry_on(run, (state, lines, step.commands))
            if isinstance(carried, RunOutcome):
                return carried
            state, lines, event = carried

    def _carry_on(
        self, run: RunRow, here: tuple[LoopState, int, tuple[Command, ...]] | None,
    ) -> tuple[LoopState, int, Event] | RunOutcome:
        """Perform the commands of ``here`` (else of the stored run, which moved on in the
        store) and return the next event with the state it applies to. A pass whose task ended
        wrote its end to the run's record itself: the run carries on from there."""
        if here is None:
            moved = self._moved_on(run.run_id)
            if isinstance(moved, RunOutcome):
                return moved
            here = (moved.state, moved.lines, entry_commands(moved.state))
        while True:
            state, lines, commands = here
            event = self._perform(run, state, commands)
            if event is not None:
                return state, lines, event
            if self.store.run(run.run_id).lines == lines:  # that pass's end is in the record already
                here = (state, lines, ())
                continue
            moved = self._moved_on(run.run_id)
            if isinstance(moved, RunOutcome):
                return moved
            if moved.status is LoopStatus.RUNNING:  # a wave's other passes are still out
                if not pending(moved.state):  # a task's end always moves the pass it runs
                    msg = (f"run {run.run_id}: the pass's task ended but the run still waits in running (its end"
                           " is not in the run's record); stop the run and start a new one")
                    raise LoopInvariantError(msg)
                here = (moved.state, moved.lines, ())
                continue
            here = (moved.state, moved.lines, entry_commands(moved.state))

    def _noted_only(self, run_id: str, lines: int) -> RunRow | None:
        """The stored run when every line written since line ``lines`` is a note (a pass's
        task of an earlier attempt ended): the run did not move, so an event still applies."""
        since = self.store.lines(run_id, lines)
        if since and all(x.kind is LineKind.NOTE or (x.kind is LineKind.PROGRESS and x.event_type == PassEnded.type)
                         for x in since):
            return self.store.run(run_id)
        return None

    def _moved_on(self, run_id: str) -> RunOutcome | RunRow:
        """Someone else appended to the run while this process worked: a person's act (a stop,
        a gate's decision), or the end of the pass's task (written with the task's last event).
        A stop ends this process's work (its line is written); after a decision or a pass's end
        the run carries on from the stored state. Any other writer is another
        driver: refused."""
        stored = self.store.run(run_id)
        lines = self.store.lines(run_id, max(stored.lines - 1, 0))  # the last line alone
        last = lines[-1] if lines else None
        if stored.status.is_terminal:
            return RunOutcome(run_id, stored.status, None, stored.state.reason)
        if last is not None and last.kind is LineKind.CLEAN_STOP:
            stops = tuple(command_from_dict(c) for c in last.commands if c.get("type") == StopWorker.type)
            self._perform_stops(stored.state, stops)
            return RunOutcome(run_id, stored.status, last.event, stored.state.reason)
        if last is not None and last.event_type in (ApprovalGranted.type, ApprovalRejected.type, PassEnded.type):
            return stored
        msg = (
            f"run {run_id} moved on in another process (line {stored.lines}: {last.event if last else ''});"
            " one 'statewright loop run' drives a run at a time"
        )
        raise InputError(msg)

    def _redacted(self, event: Event) -> Event:
        """``event`` with known secrets redacted; an approval's proposal_hash is a hash that
        binds it to what was shown and is kept as it is."""
        out: Event = self.redactor.record(event)
        decided = ApprovalGranted | ApprovalRejected
        if isinstance(out, decided) and isinstance(event, decided):
            return dataclasses.replace(out, proposal_hash=event.proposal_hash)
        return out

    # ---------------------------------------------------------------- commands

    def _perform(self, run: RunRow, state: LoopState, commands: tuple[Command, ...]) -> Event | None:
        """The event the first command (past the stops) leads to; None when the pass's task
        ended and its end is in the run's record already. Passes (launches, and waits on a
        pass's task) all start at once and report one by one, as they come back. A wave
        part-way through a state (a line with no commands) goes on with its next pass."""
        self._perform_stops(state, commands)
        if not commands and not self._inflight:
            commands = entry_commands(state)
        work = [c for c in commands if not isinstance(c, StopWorker | WakeRun)]  # a wake is a worker's
        for command in work:
            if isinstance(command, LaunchWorker | AwaitPass):
                item = WorkItem(command.item, self._payload(run, command.item), run_id=state.run_id)
                self._start(command.item, command.attempt, self._launch, item, command)
            elif isinstance(command, RunChecks) and self.definition.parallel > 1:  # a wave's checks at once too
                self._start(command.item, command.attempt, self._checks, self._check_calls(run, command), command)
        if self._inflight:
            return self._next_back()
        for command in work:
            return self._perform_one(run, state, command)
        msg = f"run {run.run_id}: {state.status} produced no command to perform; nothing to wait on"
        raise LoopInvariantError(msg)

    def _start(self, item: str, attempt: int, work: Callable[..., Event | None], *args: Any) -> None:
        """Start a pass's work (its launch, or its checks) in a thread of its own, unless it
        is out already. What the thread does touches no store of the runner's."""
        if (item, attempt) in self._inflight:
            return
        if self._passes is None:
            self._passes = ThreadPoolExecutor(max_workers=max(1, self.definition.parallel),
                                              thread_name_prefix="statewright-pass")
        self._inflight[(item, attempt)] = self._passes.submit(work, *args)

    def _next_back(self) -> Event | None:
        """The event of the first pass to come back (None: its end is in the record already)."""
        while True:
            done, _ = wait(tuple(self._inflight.values()), timeout=0.5, return_when=FIRST_COMPLETED)
            if done:
                break
        finished = next(iter(done))
        key = next(k for k, f in self._inflight.items() if f is finished)
        del self._inflight[key]
        return finished.result()

    @contextlib.contextmanager
    def _pass_threads(self) -> Iterator[None]:
        try:
            yield
        finally:
            if self._inflight:  # the run stopped: interrupt what is still out
                self.pass_runner.interrupt()
            if self._passes is not None:
                self._passes.shutdown(wait=True, cancel_futures=True)
                self._passes = None
            self._inflight.clear()

    def _perform_stops(self, state: LoopState, commands: tuple[Command, ...]) -> None:
        for command in commands:
            if isinstance(command, StopWorker):
                item = WorkItem(command.item, run_id=state.run_id)
                self.pass_runner.stop_pass(item, command.attempt)

    def _perform_one(self, run: RunRow, state: LoopState, command: Command) -> Event | None:
        d = self.definition
        if isinstance(command, FindItems):
            try:
                items = find_items(d.source, cwd=d.base_dir, environ=self.env, variables=self._variables(run))
            except SourceError as exc:
                raise SourceError(self.redactor.text(str(exc))) from None
            payloads = self.redactor.value({i.id: dict(i.data) for i in items})
            self._payloads.update(payloads)
            self._extra = {"payloads": payloads}
            return ItemsFound(tuple(payloads), self.clock())
        if isinstance(command, BuildBrief):
            data = self._payload(run, command.item)
            needs = data.get("needs_person")
            if isinstance(needs, str) and needs.strip():
                return BriefNeedsPerson(command.item, needs.strip(), self.clock())
            brief = compose_brief(command, data, state.config.attempts_per_item)
            return BriefReady(command.item, brief, self.clock())
        if isinstance(command, RunChecks):
            return self._checks(self._check_calls(run, command), command)
        if isinstance(command, RequestApproval):
            return self._gate(run, command)
        if isinstance(command, AppendRecord):  # the record is kept with the line that acknowledges it
            self._extra = {"record": record_of(command)}
            return RecordAppended(f"run {run.run_id} record {command.record_no}", self.clock())
        if isinstance(command, EvaluateGoal):
            results = tuple(self._oracle(run, name) for name in command.oracles)
            return GoalEvaluated(results, self.clock())
        msg = f"run {run.run_id}: the runner cannot perform {command.type}"
        raise LoopInvariantError(msg)

    def _payload(self, run: RunRow, item_id: str) -> Mapping[str, Any]:
        """The item as its source listed it (found by this process, or kept in the record)."""
        found = self._payloads.get(item_id)
        if found is None:
            found = self.store.item_payload(run.run_id, item_id)
        return found if found is not None else {"id": item_id}

    def _launch(self, item: WorkItem, command: LaunchWorker | AwaitPass) -> Event | None:
        """Launch the pass's worker, or take up the pass's task the run waits on (in a
        pass's thread: no store of the runner's is touched here)."""
        try:
            if isinstance(command, AwaitPass):
                result = self.pass_runner.await_pass(item, command.attempt, command.task_id)
            else:
                result = self.pass_runner.run_pass(item, command.brief, command.attempt)
        except Exception as exc:  # a failed launch is a "no result" pass, never a crash
            cause = f"launch failed: {type(exc).__name__}: {exc}"
            return WorkerNoResult(command.item, command.attempt, cause, self.clock())
        return self._pass_event(command.item, command.attempt, result)

    def _pass_event(self, item: str, attempt: int, result: PassResult) -> Event | None:
        if result.status is PassStatus.RECORDED:
            return None
        if result.status is PassStatus.WAITING:
            return PassWaiting(item, attempt, result.task_id, self.clock(), step=result.step, role=result.role)
        if result.status is PassStatus.RETURNED:
            return WorkerReturned(
                item,
                attempt,
                self.clock(),
                note=result.note,
                artifacts=result.artifacts,
                receipts=result.receipts,
                tokens=result.cost_tokens,
                money_usd=result.cost_usd,
            )
        return WorkerNoResult(
            item,
            attempt,
            result.cause or "no result",
            self.clock(),
            tokens=result.cost_tokens,
            money_usd=result.cost_usd,
        )

    def _check_calls(self, run: RunRow, command: RunChecks) -> list[Callable[[], CheckResult]]:
        """The pass's checks, each ready to run (the item read from the store here)."""
        data = self._payload(run, command.item)
        variables = {
            **self._variables(run),
            "STATEWRIGHT_ITEM_ID": command.item,
            "STATEWRIGHT_ITEM": json.dumps(dict(data), sort_keys=True, default=str),
            "STATEWRIGHT_ATTEMPT": str(command.attempt),
        }
        d = self.definition
        calls: list[Callable[[], CheckResult]] = []
        for name in command.checks:
            spec = self.definition.check(name)
            if spec is None:
                msg = f"the loop file no longer defines check {name!r}; restore it or start a new run"
                calls.append(functools.partial(CheckResult, name, CheckOutcome.ERROR, msg))
                continue
            calls.append(functools.partial(run_check, spec, cwd=d.base_dir, environ=self.env, variables=variables,
                                           protected=run.assets))
        return calls

    def _checks(self, calls: list[Callable[[], CheckResult]], command: RunChecks) -> Event:
        return CheckFinished(command.item, command.attempt, tuple(call() for call in calls), self.clock())

    def _oracle(self, run: RunRow, name: str) -> CheckResult:
        spec = self.definition.oracle(name)
        if spec is None:
            msg = f"the loop file no longer defines goal oracle {name!r}; restore it"
            return CheckResult(name, CheckOutcome.ERROR, msg)
        d = self.definition
        return run_check(spec, cwd=d.base_dir, environ=self.env, variables=self._variables(run), protected=run.assets)

    def _gate(self, run: RunRow, command: RequestApproval) -> Event:
        """A person's decision arrives as its own event (``loop approve``/``reject``); here the
        gate either times out or the process goes to sleep at it (a clean stop)."""
        now = self.clock()
        if command.timeout_at_ms is not None and now >= command.timeout_at_ms:
            return GateTimedOut(now)
        return GateSleep(now)

    def _variables(self, run: RunRow) -> dict[str, str]:
        """What every check, oracle and source command is told: the loop and the run."""
        return {"STATEWRIGHT_LOOP": self.definition.name, "STATEWRIGHT_RUN_ID": run.run_id}

    # ---------------------------------------------------------------- stops and crashes

    def _stop_reason(self, run_id: str) -> str | None:
        """The kill switch as this process sees it: a signal, or the loop file's switch file.
        ('statewright loop stop' writes its own clean-stop line: see ``request_stop``.)"""
        if self._signal is not None:
            return self._signal
        switch = self.definition.kill_switch_file
        if switch is not None and switch.exists():
            return f"file {switch}"
        return None

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        if not self.install_signal_handlers:
            yield
            return

        def handler(signum: int, frame: FrameType | None) -> None:
            self._signal = f"signal {signal.Signals(signum).name}"
            self.pass_runner.interrupt()

        previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for s, old in previous.items():
                signal.signal(s, old)


def _after_its_end(state: LoopState, event: Event) -> bool:
    """A pass's report that came back after the pass was through RUNNING: its task ended and
    the end, written with the task's last event, moved the pass on (or the run) meanwhile."""
    if not isinstance(event, WorkerReturned | WorkerNoResult | PassWaiting):
        return False
    if state.status is LoopStatus.RUNNING and any(p.item == event.item and p.attempt == event.attempt
                                                  for p in pending(state)):
        return False
    if any(p.item == event.item and p.attempt == event.attempt for p in state.wave):
        return True
    entry = state.item(event.item)  # recorded and gone from the wave already
    return state.config.parallel > 1 and entry is not None and entry.attempts >= event.attempt


def run_sleeps(run: RunRow) -> bool:
    """Whether no process drives the unfinished run: it sleeps on its pass's task or at the
    gate, and no kill switch stopped it since (what a worker may wake)."""
    cur = run.state.current
    return not run.status.is_terminal and cur is not None and cur.asleep


def refuse_changed_file(run: RunRow, definition: LoopDefinition) -> None:
    """A run is pinned to the loop file it opened with (its sha256): budgets, checks, oracles
    and the goal hold still for the run. Resuming with another file is refused."""
    if run.definition_sha256 and run.definition_sha256 != definition.sha256:
        msg = (
            f"{definition.path} changed since run {run.run_id} opened (sha256 {run.definition_sha256[:12]} then,"
            f" {definition.sha256[:12]} now); a run keeps the file it started with: restore the file to resume"
            f" run {run.run_id}, or start a new run with 'statewright loop run {definition.path} --new-run'"
        )
        raise InputError(msg)


def operator_act(store: LoopStore, run_id: str, event: Event) -> RecordLine:
    """Apply a person's act to a stored run through the reducer and append its line (one
    transaction; a run that moved on meanwhile loses cleanly and nothing is written). An act
    the reducer refuses is bad input: one line, nothing changed."""
    run = store.run(run_id)
    try:
        step = transition(run.state, event)
    except IllegalEventError as exc:
        raise InputError(str(exc)) from None
    if step.line is None:
        raise LoopInvariantError(f"run {run.run_id}: {event.type} wrote no line")
    store.append(run.run_id, expected_lines=run.lines, line=step.line, state=step.state, event=event,
                 commands=step.commands)
    return step.line


def unpark_item(store: LoopStore, run_id: str, item: str, *, actor: str, reason: str, at_ms: int) -> RecordLine:
    """Reopen a parked item of ``run_id`` (the newest run of its loop, not running now): an
    audited line naming ``actor`` and ``reason``; the next pass may pick the item again."""
    run = store.run(run_id)
    newest = store.latest_run(run.loop)
    if newest is not None and newest.run_id != run.run_id:
        msg = (
            f"run {run.run_id} is not the newest run of loop {run.loop!r} (run {newest.run_id} is,"
            f" and carries the items on); unpark the item there"
        )
        raise InputError(msg)
    if loop_is_running(store, run.loop):
        msg = f"loop {run.loop!r} is running; stop it first ('statewright loop stop {run.run_id}'), then unpark"
        raise InputError(msg)
    return operator_act(store, run_id, ItemUnparked(item, actor, reason, at_ms, event_id=new_event_id()))


def clear_hold(store: LoopStore, run_id: str, *, actor: str, reason: str, at_ms: int) -> RecordLine:
    """Lift the hold a STUCK run puts on new runs of its loop: an audited line."""
    return operator_act(store, run_id, HoldCleared(actor, reason, at_ms, event_id=new_event_id()))


def request_stop(store: LoopStore, run_id: str, *, reason: str, at_ms: int) -> RecordLine:
    """The kill switch as an operator's event: a clean-stop line in the run's record. The
    process driving the run finds it at its next append and stops there (``loop stop`` also
    signals it, so a pass in flight is interrupted)."""
    return operator_act(store, run_id, KillSwitch(f"loop stop: {reason}", at_ms, event_id=new_event_id()))


def decide_gate(
    store: LoopStore, run_id: str, *, by: Principal, proposal_hash: str, approve: bool, reason_code: str = "",
    at_ms: int,
) -> RecordLine:
    """A person's decision on the proposal a gate shows, bound to its hash, as an operator act
    (one line; refused with nothing written). ``by`` is the Principal that
    ``Users.authenticate(token)`` returned: its token is authenticated again here and the
    person's roles are the store's, never the caller's. The reducer holds the gate's rules
    (``may_decide``: a person, not an agent, with the gate's role, no author of the pass's
    work, before the time limit, on the hash shown). A run asleep at the gate gets a WakeRun
    with the decision (same commit): a worker drives it on; one a process drives carries on
    there."""
    who = Users(store.store, SystemClock()).check(by, act="approve" if approve else "reject")
    event: Event
    if approve:
        event = ApprovalGranted(proposal_hash, who.name, at_ms, who.roles, event_id=new_event_id())
    else:
        event = ApprovalRejected(proposal_hash, who.name, reason_code, at_ms, who.roles, event_id=new_event_id())
    return operator_act(store, run_id, event)


def compose_brief(command: BuildBrief, data: Mapping[str, object], attempts_per_item: int) -> str:
    """A brief that would survive a stranger: the item whole, and why earlier attempts failed."""
    parts = [
        f"Work item {command.item}, attempt {command.attempt} of {attempts_per_item}.",
        "",
        "The item, as the backlog states it:",
        json.dumps(dict(data), indent=2, sort_keys=True, default=str),
    ]
    if command.prior_failure:
        parts += ["", "The previous attempt was rejected. What failed:", command.prior_failure]
    parts += [
        "",
        "Your own report of success is kept as a note; checks you cannot edit decide the verdict.",
    ]
    return "\n".join(parts)


def default_pass_runner(definition: LoopDefinition, store: LoopStore, environ: Mapping[str, str]) -> PassRunner:
    """A CommandPassRunner for ``workflow: {command: ...}``, else the task engine (on the same
    store). ``environ`` is the runner's environment: the worker gets only its minimal part."""
    worker = definition.worker
    if worker.command is not None:
        state_dir = local_dir(store) / "loop-workers"
        return CommandPassRunner(worker.command, cwd=definition.base_dir, state_dir=state_dir, environ=environ)
    if worker.workflow_path is None:
        raise InputError(f"{definition.path}: workflow: give a workflow path or a command")
    return EnginePassRunner(store.url, worker.workflow_path)


def local_dir(store: LoopStore) -> Path:
    """Where this machine keeps a loop's local files (locks, worker pid files): next to a
    SQLite file, else a directory of the temporary dir named after the database URL."""
    if store.path is not None:
        return Path(store.path).parent
    digest = hashlib.sha256(store.url.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    # Not $TMPDIR: a command the loop runs gets a private one, and must find the same lock.
    base = Path("/tmp") if Path("/tmp").is_dir() else Path(tempfile.gettempdir())
    where = base / f"statewright-loop-{os.getuid()}" / digest
    where.mkdir(parents=True, exist_ok=True, mode=0o700)
    return where


def _lock_path(store: LoopStore, loop: str) -> str:
    if store.path is not None:
        return f"{store.path}.loop-{loop}.lock"
    return str(local_dir(store) / f"loop-{loop}.lock")


@contextlib.contextmanager
def _loop_lock(store: LoopStore, loop: str) -> Iterator[None]:
    """One outer-loop process per loop on this machine: an exclusive lock the kernel drops if
    we die. (Across machines the store's version check fences: a second driver's append loses.)"""
    lock_path = _lock_path(store, loop)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            msg = (
                f"loop {loop!r} is already running in another process (lock {lock_path});"
                " stop it with 'statewright loop stop' or wait for it to finish"
            )
            raise InputError(msg) from None
        yield
    finally:
        os.close(fd)


def loop_is_running(store: LoopStore, loop: str) -> bool:
    """True while some process on this machine holds the loop's lock."""
    lock_path = _lock_path(store, loop)
    if not os.path.exists(lock_path):
        return False
    fd = os.open(lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
