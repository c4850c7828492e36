"""Code-step and check callables for the runtime tests. What they remember lives in
files in the task's workspace, so each test sees only its own calls."""

from __future__ import annotations

import os
import threading
from typing import Any

from statewright._errors import PermanentError, TransientError
from statewright.executors import ExecContext


class QuotaExceeded(TransientError):
    """A transient error a step's retry policy may list as non-retryable."""


def _call(ctx: ExecContext) -> int:
    """Log this call's idempotency key; return how many calls this step has had."""
    log = ctx.workspace / f"{ctx.step}.calls"
    with open(log, "a", encoding="utf-8") as f:
        f.write(ctx.idempotency_key + "\n")
    return len(log.read_text(encoding="utf-8").split())


def record(ctx: ExecContext) -> bool:
    _call(ctx)
    return True


def flaky(ctx: ExecContext) -> bool:
    """Throttled twice, then fine."""
    if _call(ctx) <= 2:
        raise TransientError("throttled by the payment API", reason="throttled")
    return True


def always_throttled(ctx: ExecContext) -> bool:
    _call(ctx)
    raise TransientError("throttled by the payment API", reason="throttled")


def over_quota(ctx: ExecContext) -> bool:
    _call(ctx)
    raise QuotaExceeded("monthly quota used up", reason="quota")


def refused(ctx: ExecContext) -> bool:
    _call(ctx)
    raise PermanentError("the payment API refused the request", reason="refused")


def flag_exists(ctx: ExecContext) -> bool:
    """A wait step's check: passes once ``ctx.workspace/flag`` exists."""
    _call(ctx)
    return (ctx.workspace / "flag").exists()


HEARTBEAT_SEEN = threading.Event()


def wait_for_heartbeat(ctx: ExecContext) -> bool:
    """Runs until the worker's heartbeat has renewed this command's lease once."""
    return HEARTBEAT_SEEN.wait(10)


def effect_once(ctx: ExecContext) -> bool:
    """An idempotent effect keyed by the idempotency key: one line in
    ``workspace/effects.log`` per key, however often the step runs (each run is logged)."""
    _call(ctx)
    log = ctx.workspace / "effects.log"
    done = log.read_text(encoding="utf-8").split() if log.exists() else []
    if ctx.idempotency_key not in done:
        with open(log, "a", encoding="utf-8") as f:
            f.write(ctx.idempotency_key + "\n")
            f.flush()
            os.fsync(f.fileno())
    return True


def square(ctx: ExecContext) -> dict[str, object]:
    """A map child's work: its item squared, logged (one line per call) in the workspace."""
    _call(ctx)
    item = ctx.input["item"]
    if item == "boom":
        return {"ok": False, "output": "refused to square a bomb"}
    return {"output": {"square": int(item) ** 2, "index": ctx.input["index"]}}


# The engine and the task ``run_inner`` works, set by the test that uses it.
INNER: dict[str, Any] = {}


def run_inner(ctx: ExecContext) -> bool:
    """A step that works another task to its end in its own thread, as a script would."""
    from statewright.runtime.run import run_task

    return run_task(INNER["engine"], INNER["task_id"]).status.value == "completed"
