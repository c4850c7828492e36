"""The floor: one hand-written INSERT + COMMIT per step (WAL, synchronous=FULL)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from _common import STEPS_PER_TASK, main

BODY = "x" * 400


def setup(directory: Path) -> Callable[[int], None]:
    conn = sqlite3.connect(directory / "floor.db", isolation_level=None)
    conn.execute("CREATE TABLE steps (id INTEGER PRIMARY KEY, task TEXT, step INTEGER, body TEXT)")

    def run_one(i: int) -> None:
        for step in range(STEPS_PER_TASK):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO steps (task, step, body) VALUES (?, ?, ?)", (f"t{i}", step, BODY))
            conn.execute("COMMIT")

    return run_one


if __name__ == "__main__":
    main(setup)
