"""statewright: ``Engine.run_task`` to the approval, ``engine.approve`` by hash, ``run_task`` again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import main


def review(ctx: Any) -> bool:
    return ctx.attempt > 1  # rejects once: the loop back to implement


def trivial(ctx: Any) -> bool:
    return True


def setup(directory: Path) -> Callable[[int], None]:
    from statewright import Engine, WorkflowBuilder
    from statewright.store import open_store

    engine = Engine(open_store(f"sqlite:///{directory / 'statewright.db'}"))
    admin = engine.users.authenticate(engine.users.bootstrap("root").token)
    engine.users.add(admin, "alice", ["approver"])
    alice = engine.users.authenticate(engine.users.issue_token(admin, "alice").token)
    b = WorkflowBuilder("peer-workload")
    b.code("implement", owner="dev", run={"callable": "statewright_peer:trivial"})
    b.code("check", owner="dev", run={"callable": "statewright_peer:trivial"})
    b.code("review", owner="dev", run={"callable": "statewright_peer:review"},
           on_failure={"loop_back": "implement", "max_attempts": 3})
    b.human("approve", owner="leads", approvers={"role": "approver"})
    b.code("merge", owner="dev", run={"callable": "statewright_peer:trivial"})
    workflow = b.build()

    def run_one(i: int) -> None:
        task_id = engine.submit(workflow, {"n": i})
        view = engine.run_task(task_id)
        assert view.status == "awaiting_approval", view.status
        engine.approve(task_id, alice, proposal_hash=view.state.current.proposal_hash)
        view = engine.run_task(task_id)
        assert view.status == "completed", view.status

    return run_one


if __name__ == "__main__":
    main(setup)
