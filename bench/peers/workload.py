"""statewright's side of the peers' workload: implement -> check -> review (rejects once,
loops back to implement) -> approve (a person) -> merge, and the steps' callables. Imports
nothing but statewright, so a process can time it (bench/first_task_bench.py)."""

from __future__ import annotations

from typing import Any


def review(ctx: Any) -> bool:
    return ctx.attempt > 1  # rejects once: the loop back to implement


def trivial(ctx: Any) -> bool:
    return True


def workflow() -> Any:
    from statewright import WorkflowBuilder

    b = WorkflowBuilder("peer-workload")
    b.code("implement", owner="dev", run={"callable": "workload:trivial"})
    b.code("check", owner="dev", run={"callable": "workload:trivial"})
    b.code("review", owner="dev", run={"callable": "workload:review"},
           on_failure={"loop_back": "implement", "max_attempts": 3})
    b.human("approve", owner="leads", approvers={"role": "approver"})
    b.code("merge", owner="dev", run={"callable": "workload:trivial"})
    return b.build()
