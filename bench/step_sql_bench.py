"""What a step's commit costs in SQLite alone, against the peers' floor (one INSERT + COMMIT,
WAL, synchronous=FULL), with no Python of statewright's between the statements.

    python bench/step_sql_bench.py [--steps N] [--rounds R]

It runs the peers' workload (bench/peers/workload.py) through statewright for a few tasks,
so the database has statewright's schema and indexes and the rows are the sizes a step
really writes (the task's projection, an AttemptReported event, a RunStep command). Then,
on that database and connection, round by round, it times N steps of each of:

- ``floor``: BEGIN IMMEDIATE, one INSERT of a 400-byte row into a table with no index, COMMIT
  (bench/peers/floor.py);
- ``event``: the step's event row alone (sw_events, its primary key and event id index);
- ``event+projection``: and the UPDATE of the task's row (sw_tasks) to its new state;
- ``step``: and the outbox: the DELETE of the finished command and the INSERT of the next,
  claimed at once: the statements of a task alone's step, as ``SqlStore._append_txn`` writes
  them (store/sql.py).

It prints the median microseconds per step of each and its ratio to the floor's median in
the same rounds. The ``step`` row is the least a step can cost while its commit writes the
event, the projection and the outbox: a bound the whole engine's step cannot beat.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

PEERS = Path(__file__).resolve().parent / "peers"
FLOOR_BODY = "x" * 400
LEASE = 2_000_000_000_000
HASH = "h" * 64


def database(directory: Path) -> Path:
    """A statewright database that ran the workload: its schema, and rows to copy."""
    sys.path.insert(0, str(PEERS))
    import statewright_peer

    run_one = statewright_peer.setup(directory)
    for i in range(20):
        run_one(i)
    return directory / "statewright.db"


def variants(conn: sqlite3.Connection) -> dict[str, Callable[[], None]]:
    state = conn.execute("SELECT state FROM sw_tasks ORDER BY rowid DESC LIMIT 1").fetchone()[0]
    event = conn.execute("SELECT body FROM sw_events WHERE type = 'AttemptReported' LIMIT 1").fetchone()[0]
    command = '{"attempt":1,"step":"check"}'
    task = "t-step-sql-bench"
    conn.execute("CREATE TABLE floor (id INTEGER PRIMARY KEY, task TEXT, step INTEGER, body TEXT)")
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        "INSERT INTO sw_tasks (task_id, workflow, workflow_hash, status, version, state, last_hash,"
        " created_at_ms, updated_at_ms, kind) VALUES (?, 'peer-workload', ?, 'running', 0, ?, ?, 0, 0, 'task')",
        (task, HASH, state, HASH),
    )
    conn.execute(
        "INSERT INTO sw_outbox (command_id, task_id, type, body, available_at_ms, lease_owner, lease_expires_ms,"
        " token, deliveries, priority, fair) VALUES (?, ?, 'RunStep', ?, 0, 'w', ?, 1, 1, 0, 0)",
        (f"{task}/c0", task, command, LEASE),
    )
    conn.execute("COMMIT")
    n = [0]

    def floor() -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO floor (task, step, body) VALUES (?, ?, ?)", (task, n[0], FLOOR_BODY))
        conn.execute("COMMIT")
        n[0] += 1

    def step(projection: bool, outbox: bool) -> Callable[[], None]:
        def run() -> None:
            v = n[0]
            n[0] += 1
            conn.execute("BEGIN IMMEDIATE")
            if projection:
                conn.execute(
                    "UPDATE sw_tasks SET version = ?, state = ?, last_hash = ?, updated_at_ms = ?"
                    " WHERE task_id = ? AND version = ? AND last_hash = ? AND status = ?",
                    (v + 1, state, HASH, v, task, v, HASH, "running"),
                )
            conn.execute(
                "INSERT INTO sw_events (task_id, version, event_id, type, body, at_ms, prev_hash, hash)"
                " VALUES (?, ?, ?, 'AttemptReported', ?, ?, ?, ?)",
                (task, v + 1, f"{task}/e{v}", event, v, HASH, HASH),
            )
            if outbox:
                conn.execute("DELETE FROM sw_outbox WHERE command_id = ? AND token = ?", (f"{task}/c{v}", 1))
                conn.execute(
                    "INSERT INTO sw_outbox (command_id, task_id, type, body, available_at_ms, lease_owner,"
                    " lease_expires_ms, token, deliveries, priority, fair) VALUES (?, ?, 'RunStep', ?, ?, 'w', ?,"
                    " 1, 1, 0, MAX(COALESCE((SELECT MAX(fair) FROM sw_outbox WHERE tenant = '')"
                    " + COALESCE((SELECT share_step FROM sw_tenants WHERE tenant = ''), 1000000), 0),"
                    " COALESCE((SELECT MIN(fair) FROM sw_outbox WHERE priority = 0), 0)))",
                    (f"{task}/c{v + 1}", task, command, v, LEASE),
                )
            conn.execute("COMMIT")

        return run

    return {"floor": floor, "event": step(False, False), "event+projection": step(True, False),
            "step": step(True, True)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="steps timed per variant and round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="step-sql-") as tmp:
        path = database(Path(tmp))
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        runs = variants(conn)
        print(f"# {datetime.now(UTC):%Y-%m-%d %H:%M UTC}, {platform.machine()}, {os.cpu_count()} cores,"
              f" Python {platform.python_version()}, SQLite {sqlite3.sqlite_version},"
              f" load {os.getloadavg()[0]:.2f}")
        print(f"# {args.rounds} rounds x {args.steps} steps per variant, interleaved")
        times: dict[str, list[float]] = {name: [] for name in runs}
        for r in range(args.rounds):
            names = list(runs)
            for name in names[r % len(names):] + names[: r % len(names)]:
                started = time.perf_counter()
                for _ in range(args.steps):
                    runs[name]()
                times[name].append((time.perf_counter() - started) / args.steps * 1e6)
        conn.close()
    floor = statistics.median(times["floor"])
    print(f"{'commit of':18} {'us/step':>8} {'x floor':>8}   rounds")
    for name, xs in times.items():
        median = statistics.median(xs)
        print(f"{name:18} {median:8.0f} {median / floor:8.2f}   {', '.join(f'{x:.0f}' for x in xs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
