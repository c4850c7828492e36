"""What every peer process shares: SQL tracing, the timed loop, one JSON line of results.

A peer module defines ``setup(directory) -> run_one`` where ``run_one(i)`` runs task ``i``
of the workload to its end: implement -> check -> review (rejects once, loops back to
implement) -> approve (a pause for a person, approved at once) -> merge, 8 steps of trivial
Python. ``main`` times each task, counts what reached SQLite and prints one JSON line.

Every ``sqlite3.connect`` in the process is wrapped before the peer's library is imported:
each new connection gets WAL and ``synchronous=FULL`` (the same durability for all) and a trace
callback that counts statements, write commits (a transaction that wrote, or a write outside
a transaction) and read-only transactions.
"""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path

STARTED = time.perf_counter()
STEPS_PER_TASK = 8


class Tally:
    """Counts, per connection, from SQLite's trace of every statement run: a write commit is
    a transaction (or a statement outside one) after which the connection's total of changed
    rows grew; a read-only transaction is one that changed nothing."""

    def __init__(self) -> None:
        self.statements = 0
        self.write_commits = 0
        self.read_transactions = 0
        self._settle: list[Callable[[], None]] = []

    def settle(self) -> None:
        for settle in self._settle:
            settle()

    def tracer(self, conn: sqlite3.Connection) -> Callable[[str], None]:
        state = {"open": False, "at": 0, "loose": -1}

        def settle() -> None:  # a statement run outside a transaction: did it change rows?
            if state["loose"] >= 0 and conn.total_changes > state["loose"]:
                self.write_commits += 1
            state["loose"] = -1

        def trace(sql: str) -> None:
            settle()
            self.statements += 1
            head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
            if head in ("BEGIN", "SAVEPOINT") and not state["open"]:
                state.update(open=True, at=conn.total_changes)
            elif head in ("COMMIT", "END", "RELEASE") and state["open"]:
                if conn.total_changes > state["at"]:
                    self.write_commits += 1
                else:
                    self.read_transactions += 1
                state["open"] = False
            elif head == "ROLLBACK" and "TO" not in sql.upper().split():
                state["open"] = False
            elif not state["open"] and head not in ("SELECT", "PRAGMA"):
                state["loose"] = conn.total_changes

        self._settle.append(settle)
        return trace


TALLY = Tally()
_connect = sqlite3.connect


def _traced_connect(*args, **kwargs):  # type: ignore[no-untyped-def]
    conn = _connect(*args, **kwargs)
    target = str(args[0] if args else kwargs.get("database", ""))
    if target not in (":memory:", "") and not target.startswith("file::memory:"):
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
    conn.set_trace_callback(TALLY.tracer(conn))
    return conn


sqlite3.connect = _traced_connect  # type: ignore[assignment]
sqlite3.dbapi2.connect = _traced_connect  # type: ignore[assignment]  # SQLAlchemy's pysqlite uses this name


def peak_rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main(setup: Callable[[Path], Callable[[int], None]]) -> None:
    directory = Path(sys.argv[1])
    tasks = int(sys.argv[2])
    run_one = setup(directory)
    run_one(0)
    TALLY.settle()
    first_task_ms = (time.perf_counter() - STARTED) * 1000
    before = (TALLY.write_commits, TALLY.read_transactions, TALLY.statements)
    walls, cpus = [], []
    for i in range(1, tasks + 1):
        c0, t0 = time.process_time(), time.perf_counter()
        run_one(i)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    TALLY.settle()
    n = len(walls)
    print(json.dumps({
        "first_task_ms": first_task_ms,
        "task_wall_s": walls,
        "task_cpu_s": cpus,
        "write_commits_per_task": (TALLY.write_commits - before[0]) / n,
        "read_transactions_per_task": (TALLY.read_transactions - before[1]) / n,
        "statements_per_task": (TALLY.statements - before[2]) / n,
        "peak_rss_kb": peak_rss_kb(),
        "pid": os.getpid(),
    }), flush=True)
