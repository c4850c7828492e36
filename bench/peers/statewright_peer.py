"""statewright: ``start_task`` (submit and run) to the approval, then ``approve_and_run`` by hash."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import workload
from _common import main


def build(directory: Path, url: str | None = None) -> tuple[Any, Any, Any]:
    """The engine on a new database (a SQLite file in ``directory`` unless ``url`` names
    one), the workload's workflow, and alice who approves."""
    from statewright import Engine
    from statewright.store import open_store

    engine = Engine(open_store(url or f"sqlite:///{directory / 'statewright.db'}"))
    admin = engine.users.authenticate(engine.users.bootstrap("root").token)
    engine.users.add(admin, "alice", ["approver"])
    alice = engine.users.authenticate(engine.users.issue_token(admin, "alice").token)
    return engine, workload.workflow(), alice


def setup(directory: Path) -> Callable[[int], None]:
    from statewright import approve_and_run, start_task

    engine, workflow, alice = build(directory)

    def run_one(i: int) -> None:
        state = start_task(engine, workflow, {"n": i})
        assert state.status == "awaiting_approval", state.status
        state = approve_and_run(engine, state.task_id, alice, proposal_hash=state.current.proposal_hash)
        assert state.status == "completed", state.status

    return run_one


if __name__ == "__main__":
    main(setup)
