"""Code callables and checks that end the worker process they run in, for the redelivery
tests. Each logs its run (attempt and delivery) in ``workspace/runs`` first, so a test can
count how often it was started."""

from __future__ import annotations

import os
import signal

from statewright.executors import ExecContext


def _log(ctx: ExecContext) -> None:
    with open(ctx.workspace / "runs", "a", encoding="utf-8") as fh:
        fh.write(f"{ctx.attempt} {ctx.deliveries}\n")


def exit_process(ctx: ExecContext) -> bool:
    """``os._exit(1)`` on the step's first attempt (no cleanup, no report); later attempts pass."""
    _log(ctx)
    if ctx.attempt == 1:
        os._exit(1)
    return True


def kill_process(ctx: ExecContext) -> bool:
    """SIGKILL to its own process on the step's first attempt; later attempts pass."""
    _log(ctx)
    if ctx.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return True


def counted(ctx: ExecContext) -> bool:
    """A healthy step (or check) that logs its runs."""
    _log(ctx)
    return True
