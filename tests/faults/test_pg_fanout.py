"""A map step of 50 children, at most 8 at once, worked by 3 worker processes on one
PostgreSQL database while workers are SIGKILLed (at each named crash point, and at random)
and replaced.

Checked afterwards: the parent and all 50 children completed; each child's effect (a row
keyed by its idempotency key) happened exactly once, and so did the parent's step after the
map; the parent's log holds one ChildEnded per child; nothing is left in the outbox; and
``verify`` finds every log whole and every projection what its log replays to.

As in test_pg_workers.py, the fault injector is a timed loop by nature (kill, replace, look
again); it waits on processes and the database, never on a sleep to make a result true."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from faults.fault_steps import create_effects
from statewright import Engine
from statewright.definition.loader import load_workflow
from statewright.machine.events import ChildEnded
from statewright.machine.state import TaskStatus
from statewright.runtime.verify import verify_all
from statewright.store import open_store
from statewright.store.postgres import split_url
from store.backends import fresh_pg_schema

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
ITEMS = 50
CONCURRENCY = 8
WORKERS = 3
DEADLINE_SECONDS = 150.0  # a failure threshold: the run takes 10-20 s on 2 busy, shared cores
# Each point kills the first worker to pass it; "in_append_txn:3" dies inside a later commit,
# often one that carries a child's end and its parent's next child together.
CRASH_POINTS = ("after_claim", "before_effect", "after_effect", "in_append_txn", "after_append", "in_append_txn:3")
RANDOM_KILLS = 4

CHILD = """\
workflow: effect-one
input_schema:
  type: object
  properties: {item: {type: integer}, index: {type: integer}}
steps:
  - {id: work, kind: code, owner: ops, run: {callable: "fault_steps:record"}}
"""
PARENT = f"""\
workflow: fan-out
input_schema:
  type: object
  properties: {{items: {{type: array}}}}
steps:
  - id: each
    kind: map
    owner: ops
    workflow: effect-one.yaml
    items: input.items
    max_concurrency: {CONCURRENCY}
  - {{id: total, kind: code, owner: ops, run: {{callable: "fault_steps:record"}}}}
"""


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_pg_schema("swfan") as (url, _name):
        yield url


def _stalled(engine: Engine, elapsed: float) -> str:
    """What a run that stopped moving left: its tasks by status, and the live tasks' outbox
    rows and timers."""
    live = [t.task_id for t in engine.store.list_tasks() if t.status == "running"]
    rows = [r for t in live for r in engine.store.outbox(t)]
    timers = [r for t in live for r in engine.store.timers(t)]
    logs = {t: [e.type for e in engine.store.events(t)][-4:] for t in live}
    return (f"not done after {elapsed:.0f}s: {engine.store.counts_by_status()}; live {live};"
            f" outbox {rows}; timers {timers}; their last events {logs}")


def test_a_map_of_fifty_children_survives_killed_workers(pg_url: str, tmp_path: Path) -> None:
    """50 children through 3 worker processes with SIGKILLs: all complete, every effect once, verify passes."""
    conninfo, schema = split_url(pg_url)
    assert schema is not None
    (tmp_path / "effect-one.yaml").write_text(CHILD, encoding="utf-8")
    (tmp_path / "fan-out.yaml").write_text(PARENT, encoding="utf-8")
    engine = Engine(open_store(pg_url), workspace_root=tmp_path / "ws")
    create_effects(conninfo, schema)

    env = {
        **os.environ,
        "FAULTS_PG_CONNINFO": conninfo,
        "FAULTS_PG_SCHEMA": schema,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("STATEWRIGHT_CRASH_AT", None)
    logs = tmp_path / "logs"
    logs.mkdir()
    spawned = 0
    points = list(CRASH_POINTS)

    def spawn() -> tuple[subprocess.Popen[bytes], str]:
        """A worker that carries the next unused crash point, or a plain one when all are used."""
        nonlocal spawned
        spawned += 1
        point = points.pop(0) if points else ""
        log = (logs / f"worker-{spawned}.log").open("wb")
        try:
            proc = subprocess.Popen(
                [sys.executable, str(HERE / "pg_worker.py"), pg_url, str(tmp_path / "ws"), "30"],
                env=dict(env, STATEWRIGHT_CRASH_AT=point) if point else env, stdout=log,
                stderr=subprocess.STDOUT, cwd=tmp_path,
            )
        finally:
            log.close()
        return proc, point

    tid = engine.submit(load_workflow(tmp_path / "fan-out.yaml"), {"items": list(range(ITEMS))})
    rng = random.Random(20261202)
    workers = [spawn() for _ in range(WORKERS)]
    crashed: list[tuple[str, int]] = []
    kills = 0
    started = time.monotonic()
    try:
        next_kill = time.monotonic() + 1.0
        while (parent := engine.state(tid)).status is not TaskStatus.COMPLETED:  # one read per look
            elapsed = time.monotonic() - started
            assert elapsed < DEADLINE_SECONDS, _stalled(engine, elapsed)
            assert parent.status is TaskStatus.RUNNING, parent.halt
            for n, (proc, point) in enumerate(workers):
                if proc.poll() is not None:
                    if point:
                        crashed.append((point, proc.returncode))
                    workers[n] = spawn()
            plain = [n for n, (_, point) in enumerate(workers) if not point]
            if time.monotonic() >= next_kill and kills < RANDOM_KILLS and plain:
                n = rng.choice(plain)
                workers[n][0].send_signal(signal.SIGKILL)
                workers[n][0].wait()
                kills += 1
                workers[n] = spawn()
                next_kill = time.monotonic() + rng.uniform(0.5, 1.5)
            time.sleep(0.05)
    finally:
        for proc, _ in workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, _ in workers:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    try:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{schema}"')
            effects = conn.execute("SELECT key, attempts FROM effects").fetchall()
            leftovers = conn.execute(
                "SELECT (SELECT COUNT(*) FROM sw_outbox), (SELECT COUNT(*) FROM sw_timers)").fetchone()
        children = [f"{tid}.each.1.{i}" for i in range(ITEMS)]
        assert engine.store.counts_by_status() == {"completed": ITEMS + 1}
        assert sorted(k.task_id for k in engine.store.children(tid)) == sorted(children)
        # Every effect once, under the key its command carried on every delivery.
        expected = {f"{c}/work/1" for c in children} | {f"{tid}/total/1"}
        assert {str(k) for k, _ in effects} == expected and len(effects) == len(expected)
        ended = [e for e in engine.events(tid) if isinstance(e, ChildEnded)]
        assert sorted(e.child_id for e in ended) == sorted(children)
        assert leftovers == (0, 0)
        assert [r is not None for r in engine.state(tid).results["each"]["results"]] == [True] * ITEMS
        assert verify_all(engine) == (ITEMS + 1, [])
        assert len(crashed) >= 3, crashed  # the crash points were passed and killed their workers
        assert all(code == -signal.SIGKILL for _, code in crashed), crashed
    finally:
        engine.close()
    rerun = sum(int(a) - 1 for _, a in effects)
    print(f"\n{ITEMS} children, {spawned} worker processes started, {kills} random SIGKILLs + "
          f"{len(crashed)} crash points ({', '.join(p for p, _ in crashed)}), {rerun} steps re-run, "
          f"run {time.monotonic() - started:.1f}s")
