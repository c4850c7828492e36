"""Waking a loop run that sleeps on its pass's task: what a worker does with ``WakeRun``.

    the pass's task waits for a person       the run sleeps in RUNNING (a PassWaiting line)
    a person approves; a worker ends the task  -> in the same commit: the run's PassEnded line
                                                  and a WakeRun row in the outbox
    a worker claims WakeRun                  -> wake_run(): 'loop run' of that run, in the worker

The worker reads the loop file the run opened with (its absolute path, kept with the run) and
drives the run as ``statewright loop run`` would, until it ends, stops cleanly or sleeps
again. A file that changed since is refused as 'loop run' refuses it; a run that another
process drives, that has ended, or that a newer run of its loop replaced is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from statewright._errors import StatewrightError
from statewright.loop.definition import load_loop
from statewright.loop.runner import LoopRunner, RunOutcome
from statewright.loop.store import LoopStore
from statewright.machine.loop.events import WakeRun
from statewright.store.base import Store

log = logging.getLogger("statewright.worker")


def wake_run(store: Store, run_id: str, *, env: Mapping[str, str] | None = None,
             clock: Callable[[], int] | None = None) -> RunOutcome | None:
    """Drive loop run ``run_id`` on from where its pass's task left it. None when there is
    nothing to do (the run ended) or it cannot be driven here (one log line says why)."""
    loops = LoopStore(store, owns=False)
    run = loops.run(run_id)
    if run.status.is_terminal:
        return None
    path = run.definition_file or run.definition_path
    try:
        definition = load_loop(Path(path))
        extra: dict[str, Any] = {"clock": clock} if clock is not None else {}
        runner = LoopRunner(definition, loops, env=env, trigger=f"run {run_id} woken by its pass's task",
                            resume_run=run_id, **extra)
        outcome = runner.run()
    except StatewrightError as exc:
        log.warning("loop run %s not woken: %s", run_id, exc)
        return None
    log.info("loop run %s woken: %s%s", run_id, outcome.status,
             f" ({outcome.paused})" if outcome.paused else f" ({outcome.reason})" if outcome.reason else "")
    return outcome


def handlers(store: Store) -> dict[str, Callable[[Mapping[str, Any]], None]]:
    """The worker's handlers for the loop's outbox commands, by command type."""

    def wake(body: Mapping[str, Any]) -> None:
        wake_run(store, str(body["run_id"]))

    return {WakeRun.type: wake}
