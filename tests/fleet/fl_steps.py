"""Step callables of the fleet tests: each records the task it ran for, in the order run."""

from __future__ import annotations

import threading

from statewright.executors import ExecContext

RAN: list[str] = []
_LOCK = threading.Lock()


def record(ctx: ExecContext) -> bool:
    with _LOCK:
        RAN.append(ctx.task_id)
    return True

