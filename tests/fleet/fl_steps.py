"""Step callables of the fleet tests: each records the task it ran for, in the order run."""

from __future__ import annotations

import threading
from collections.abc import Callable

from statewright.executors import ExecContext

RAN: list[str] = []
_LOCK = threading.Lock()


def record(ctx: ExecContext) -> bool:
    with _LOCK:
        RAN.append(ctx.task_id)
    return True


DURING: list[Callable[[], None]] = []  # what ``record_and_call`` calls while its step runs


def record_and_call(ctx: ExecContext) -> bool:
    """``record``, then each of ``DURING``: what other workers do while this step holds its slot."""
    record(ctx)
    for call in DURING:
        call()
    return True
