"""Burr with its SQLite persister: run to the approval (halt_before), then resume to the end."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from _common import main


def setup(directory: Path) -> Callable[[int], None]:
    from burr.core import ApplicationBuilder, State, action, expr
    from burr.core.persistence import SQLitePersister

    @action(reads=[], writes=[])
    def implement(state: State) -> State:
        return state

    @action(reads=[], writes=[])
    def check(state: State) -> State:
        return state

    @action(reads=["reviews"], writes=["reviews"])
    def review(state: State) -> State:
        return state.update(reviews=state["reviews"] + 1)

    @action(reads=[], writes=[])
    def approve(state: State) -> State:
        return state

    @action(reads=[], writes=[])
    def merge(state: State) -> State:
        return state

    persister = SQLitePersister(db_path=str(directory / "burr.db"), table_name="burr_state",
                                connect_kwargs={"check_same_thread": False})
    persister.initialize()

    def build(app_id: str):  # type: ignore[no-untyped-def]
        return (
            ApplicationBuilder()
            .with_actions(implement, check, review, approve, merge)
            .with_transitions(
                ("implement", "check"),
                ("check", "review"),
                ("review", "implement", expr("reviews < 2")),
                ("review", "approve"),
                ("approve", "merge"),
            )
            .initialize_from(persister, resume_at_next_action=True, default_state={"reviews": 0},
                             default_entrypoint="implement")
            .with_state_persister(persister)
            .with_identifiers(app_id=app_id)
            .build()
        )

    def run_one(i: int) -> None:
        app = build(f"t{i}")
        action_, _, _ = app.run(halt_before=["approve"])
        assert action_.name == "approve"
        app = build(f"t{i}")  # the person approves later: the run resumes from the store
        action_, _, _ = app.run(halt_after=["merge"])
        assert action_.name == "merge"

    return run_one


if __name__ == "__main__":
    main(setup)
