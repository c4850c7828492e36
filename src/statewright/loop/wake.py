"""Waking a loop run that sleeps (on its pass's task, or at the gate): what a worker does with
``WakeRun``.

    the pass's task waits for a person       the run sleeps in RUNNING (a PassWaiting line)
    a person approves; a worker ends the task  -> in the same commit: the run's PassEnded line
                                                  and a WakeRun row in the outbox
    the run's gate waits for a person        the run sleeps in AWAITING_HUMAN (a GateSleep line;
                                             with a time limit, a WakeRun due when it passes)
    'loop approve' / 'loop reject'           -> in the same commit: the decision's line and a
                                                  WakeRun row in the outbox
    a worker claims WakeRun                  -> wake_run(): 'loop run' of that run, in the worker

The worker reads the loop file the run opened with (its absolute path, kept with the run) and
drives the run as ``statewright loop run`` would, until it ends, stops cleanly or sleeps
again. A file that changed since is refused as 'loop run' refuses it; a run that another
process drives, that a kill switch stopped, that has ended, or that a newer run of its loop
replaced is left alone; so is a gate's timer whose gate was decided.

A process that drives a run holds a lease on it (a ``DriveRun`` row, claimed with the first
line it writes and renewed while it drives). When it dies without giving the lease up (a
SIGKILL, a lost machine), the lease runs out and a worker claims the row: the run is taken up
where it stands, as a restarted 'loop run' would take it up (an unclean start, counted
against its state), unless a process started on the run since, it stopped cleanly, or ended.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from statewright._errors import StatewrightError
from statewright.loop.definition import load_loop
from statewright.loop.runner import DRIVE_LEASE_SECONDS, LoopRunner, RunOutcome, run_sleeps
from statewright.loop.store import LoopStore
from statewright.machine.loop.events import DriveRun, ProcessStarted, WakeRun
from statewright.machine.loop.model import LineKind, LoopStatus
from statewright.store.base import Store

log = logging.getLogger("statewright.worker")


def wake_run(store: Store, run_id: str, *, env: Mapping[str, str] | None = None,
             clock: Callable[[], int] | None = None, gate: str = "", after_line: int = 0,
             lease_seconds: float = DRIVE_LEASE_SECONDS) -> RunOutcome | None:
    """Drive loop run ``run_id`` on from where its pass's task or a gate's decision left it.
    ``gate`` (a proposal hash) makes it the gate's timer: the run is driven only while it
    still sleeps at that gate. ``after_line``: the line that asked for the wake; a run that
    moved on past it since (anything but note lines) was taken up by another process. None
    when there is nothing to do (the run ended, was stopped, another process drives it or
    drove it on, the gate was decided) or it cannot be driven here (one log line says why)."""
    loops = LoopStore(store, owns=False)
    run = loops.run(run_id)
    if not run_sleeps(run):
        log.info("loop run %s not woken: it is %s%s", run_id, run.status,
                 "" if run.status.is_terminal else ", and stopped or driven by a 'loop run' process")
        return None
    if after_line and any(x.kind is not LineKind.NOTE for x in loops.lines(run_id, after_line)):
        log.info("loop run %s not woken: a 'loop run' process took it up after line %d", run_id, after_line)
        return None
    cur = run.state.current
    if gate and (run.status is not LoopStatus.AWAITING_HUMAN or cur is None or cur.proposal_hash != gate):
        log.info("loop run %s not woken: its gate of hash %s was decided", run_id, gate[:12])
        return None
    why = "the gate's time limit" if gate else "its pass's task or a gate's decision"
    return _drive(loops, run_id, run.definition_file or run.definition_path, env, clock,
                  f"run {run_id} woken by {why}", adopt=False, lease_seconds=lease_seconds)


def drive_run(store: Store, run_id: str, line: int, *, env: Mapping[str, str] | None = None,
              clock: Callable[[], int] | None = None, lease_seconds: float = DRIVE_LEASE_SECONDS) -> RunOutcome | None:
    """Take up loop run ``run_id`` whose driver, which started at line ``line``, died: its
    lease ran out. None when there is nothing to take up (one log line says why)."""
    loops = LoopStore(store, owns=False)
    run = loops.run(run_id)
    if run.status.is_terminal or run.state.clean_stop:
        how = "ended" if run.status.is_terminal else "stopped cleanly or sleeps"
        log.info("loop run %s not taken up: it %s (%s)", run_id, how, run.status)
        return None
    if any(x.event_type == ProcessStarted.type for x in loops.lines(run_id, line)):
        log.info("loop run %s not taken up: a process started on it after line %d", run_id, line)
        return None
    return _drive(loops, run_id, run.definition_file or run.definition_path, env, clock,
                  f"run {run_id} taken up after its driver's lease ran out", adopt=True, lease_seconds=lease_seconds)


def _drive(loops: LoopStore, run_id: str, path: str, env: Mapping[str, str] | None,
           clock: Callable[[], int] | None, trigger: str, *, adopt: bool, lease_seconds: float) -> RunOutcome | None:
    said = "taken up" if adopt else "woken"
    try:
        definition = load_loop(Path(path))
        extra: dict[str, Any] = {"clock": clock} if clock is not None else {}
        runner = LoopRunner(definition, loops, env=env, trigger=trigger, resume_run=run_id, adopt=adopt,
                            lease_seconds=lease_seconds, **extra)
        outcome = runner.run()
    except StatewrightError as exc:
        log.warning("loop run %s not %s: %s", run_id, said, exc)
        return None
    log.info("loop run %s %s: %s%s", run_id, said, outcome.status,
             f" ({outcome.paused})" if outcome.paused else f" ({outcome.reason})" if outcome.reason else "")
    return outcome


def handlers(store: Store, clock: Callable[[], int] | None = None, *, lease_seconds: float = DRIVE_LEASE_SECONDS,
             ) -> dict[str, Callable[[Mapping[str, Any]], None]]:
    """The worker's handlers for the loop's outbox commands, by command type (``clock``, epoch
    milliseconds, is the woken run's; the system's by default; ``lease_seconds``: the lease the
    worker holds on a run while it drives it)."""

    def wake(body: Mapping[str, Any]) -> None:
        gate = str(body.get("proposal_hash") or "") if body.get("due_at_ms") is not None else ""
        wake_run(store, str(body["run_id"]), clock=clock, gate=gate, after_line=int(body.get("after_line") or 0),
                 lease_seconds=lease_seconds)

    def drive(body: Mapping[str, Any]) -> None:
        drive_run(store, str(body["run_id"]), int(body.get("line") or 0), clock=clock, lease_seconds=lease_seconds)

    return {WakeRun.type: wake, DriveRun.type: drive}
