"""``run_task``: work one task in this process until it settles, for scripts, tests and
``statewright run``. It drives a Worker over the engine; the engine itself never builds a
worker (the worker calls the engine, not the other way round)."""

from __future__ import annotations

from statewright.machine.state import TaskState, TaskStatus
from statewright.runtime.engine import Engine
from statewright.runtime.worker import Worker

#: Where an in-process run stops: the task ended, or it waits for a person.
SETTLED = frozenset({
    TaskStatus.COMPLETED, TaskStatus.COMPLETED_EARLY, TaskStatus.HALTED, TaskStatus.CANCELLED,
    TaskStatus.AWAITING_APPROVAL,
})


def run_task(engine: Engine, task_id: str, *, lease_seconds: float = 30.0) -> TaskState:
    """Work in this process until the task ends or parks at a human step, and return its
    state then: the same ``TaskState`` that ``engine.state(task_id)`` returns (``.status``,
    ``.current``, ``.results``, ``.cost``)."""
    Worker(engine, lease_seconds=lease_seconds).run(until=lambda: engine.state(task_id).status in SETTLED)
    return engine.state(task_id)
