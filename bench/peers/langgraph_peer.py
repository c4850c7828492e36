"""LangGraph with its SQLite checkpointer, durability "sync"; the approval is an interrupt()."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from _common import main


class State(TypedDict):
    n: int
    reviews: int


def setup(directory: Path) -> Callable[[int], None]:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt

    def trivial(state: State) -> dict[str, Any]:
        return {}

    def review(state: State) -> dict[str, Any]:
        return {"reviews": state["reviews"] + 1}

    def approve(state: State) -> dict[str, Any]:
        interrupt({"proposal": state["n"]})
        return {}

    g = StateGraph(State)
    for name in ("implement", "check", "merge"):
        g.add_node(name, trivial)
    g.add_node("review", review)
    g.add_node("approve", approve)
    g.add_edge(START, "implement")
    g.add_edge("implement", "check")
    g.add_edge("check", "review")
    g.add_conditional_edges("review", lambda s: "implement" if s["reviews"] < 2 else "approve")
    g.add_edge("approve", "merge")
    g.add_edge("merge", END)
    conn = sqlite3.connect(directory / "langgraph.db", check_same_thread=False)
    graph = g.compile(checkpointer=SqliteSaver(conn))

    def run_one(i: int) -> None:
        config = {"configurable": {"thread_id": f"t{i}"}}
        graph.invoke({"n": i, "reviews": 0}, config, durability="sync")
        assert graph.get_state(config).next == ("approve",)
        graph.invoke(Command(resume=True), config, durability="sync")
        assert not graph.get_state(config).next

    return run_one


if __name__ == "__main__":
    main(setup)
