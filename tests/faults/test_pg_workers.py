"""Eight worker processes, one PostgreSQL database, a thousand tasks, workers SIGKILLed along
the way (at random, and at each named crash point) and replaced.

Checked afterwards: every task completed; each effect keyed by its idempotency key happened
exactly once (and a redelivered command re-ran its step under the same key); the event logs
are whole and hash-chained; and no command was ever held under two live leases, both by a
trigger that audits every re-claim in the database and by sampling the outbox during the run.

The fault injector is a timed loop by nature (kill, replace, look again): it is the one place
this suite reads wall time, and it waits on processes and the database, never on a sleep to
make a result true."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest

from statewright import Engine
from statewright.definition.builder import WorkflowBuilder
from statewright.store import open_store
from statewright.store.chain import GENESIS_HASH, Chain, RawEvent
from statewright.store.postgres import split_url
from store.backends import fresh_pg_schema
from tally import tally

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
TASKS = 1000
WORKERS = 8
LEASE_MS = 2000
DEADLINE_SECONDS = 180.0  # a failure threshold: the run took 40-60 s on 2 busy, shared cores
CRASH_POINTS = ("after_claim", "before_effect", "after_effect", "in_append_txn", "after_append")
RANDOM_KILLS = 12

AUDIT_SQL = [
    """CREATE TABLE effects (
        key TEXT PRIMARY KEY,
        task_id TEXT NOT NULL,
        step TEXT NOT NULL,
        first_pid INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE lease_overlaps (
        command_id TEXT, old_token INTEGER, new_token INTEGER, old_owner TEXT,
        old_expires_ms BIGINT, new_expires_ms BIGINT
    )""",
    # A re-claim (token goes up) while the previous lease had not yet run out is two live
    # leases at once. Every claim sets lease_expires_ms = its now + LEASE_MS.
    f"""CREATE FUNCTION audit_reclaim() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.token > OLD.token AND OLD.lease_expires_ms IS NOT NULL
           AND OLD.lease_expires_ms > NEW.lease_expires_ms - {LEASE_MS} THEN
            INSERT INTO lease_overlaps VALUES (OLD.command_id, OLD.token, NEW.token,
                OLD.lease_owner, OLD.lease_expires_ms, NEW.lease_expires_ms);
        END IF;
        RETURN NEW;
    END $$""",
    "CREATE TRIGGER audit_reclaim BEFORE UPDATE ON sw_outbox FOR EACH ROW EXECUTE FUNCTION audit_reclaim()",
]


class OutboxSampler(threading.Thread):
    """Reads the live leases every few milliseconds. If token k+1 of a command is seen at a
    time before token k's lease (as last seen) ran out, two leases were live together."""

    def __init__(self, conninfo: str, schema: str) -> None:
        super().__init__(name="outbox-sampler", daemon=True)
        self.conninfo, self.schema = conninfo, schema
        self.stop = threading.Event()
        self.samples = 0
        self.problems: list[str] = []
        self.error: BaseException | None = None
        # command -> token -> (owner, latest expiry seen, first seen at)
        self.seen: dict[str, dict[int, tuple[str, int, int]]] = defaultdict(dict)

    def run(self) -> None:
        try:
            with psycopg.connect(self.conninfo, autocommit=True) as conn:
                conn.execute(f'SET search_path TO "{self.schema}"')
                while not self.stop.wait(0.01):
                    rows = conn.execute(
                        "SELECT command_id, token, lease_owner, lease_expires_ms FROM sw_outbox"
                        " WHERE lease_expires_ms IS NOT NULL"
                    ).fetchall()
                    at_ms = time.time_ns() // 1_000_000  # after the snapshot was taken
                    self.samples += 1
                    for cid, token, owner, expires in rows:
                        self._observe(str(cid), int(token), str(owner), int(expires), at_ms)
        except BaseException as exc:  # reported by the test, not lost in a thread
            self.error = exc

    def _observe(self, cid: str, token: int, owner: str, expires: int, at_ms: int) -> None:
        tokens = self.seen[cid]
        prev = tokens.get(token)
        if prev is not None and prev[0] != owner:
            self.problems.append(f"{cid} token {token} held by {prev[0]} and {owner}")
        first = prev[2] if prev else at_ms
        tokens[token] = (owner, max(expires, prev[1] if prev else 0), first)
        for older, (o_owner, o_expires, _) in tokens.items():
            if older < token and at_ms < o_expires:
                self.problems.append(
                    f"{cid}: token {token} ({owner}) live at {at_ms} while token {older} "
                    f"({o_owner}) was leased until {o_expires}"
                )


def _workflow() -> Any:
    run = {"callable": "fault_steps:record"}
    return (
        WorkflowBuilder("faults")
        .code("charge", owner="ops", run=run)
        .code("ship", owner="ops", run=run)
        .build()
    )


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_pg_schema("swfault") as (url, _name):
        yield url


def test_workers_killed_at_random_lose_nothing_and_repeat_no_effect(pg_url: str, tmp_path: Path) -> None:
    """1,000 tasks through 8 worker processes with SIGKILLs: all complete, every effect once."""
    conninfo, schema = split_url(pg_url)
    assert schema is not None
    engine = Engine(open_store(pg_url), workspace_root=tmp_path / "ws")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        for stmt in AUDIT_SQL:
            conn.execute(stmt)

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

    def spawn(crash_at: str = "") -> subprocess.Popen[bytes]:
        nonlocal spawned
        spawned += 1
        child_env = dict(env, STATEWRIGHT_CRASH_AT=crash_at) if crash_at else env
        log = (logs / f"worker-{spawned}.log").open("wb")
        try:
            return subprocess.Popen(
                [sys.executable, str(HERE / "pg_worker.py"), pg_url, str(tmp_path / "ws"), "30"],
                env=child_env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
            )
        finally:
            log.close()

    wf = _workflow()
    engine.register(wf)
    task_ids = [f"t{i:04d}" for i in range(TASKS)]
    t_submit = time.monotonic()
    with ThreadPoolExecutor(4) as pool:  # one commit per task: overlap them
        list(pool.map(lambda i: engine.submit(wf, {"n": i}, task_id=task_ids[i]), range(TASKS)))

    rng = random.Random(20240607)
    sampler = OutboxSampler(conninfo, schema)
    kills = 0
    started = time.monotonic()
    # Five of the eight carry a crash point and SIGKILL themselves there; the rest are killed
    # at random moments. Every dead worker is replaced by a plain one.
    workers = [spawn(point) for point in CRASH_POINTS]
    workers += [spawn() for _ in range(WORKERS - len(CRASH_POINTS))]
    crashers = {n: point for n, point in enumerate(CRASH_POINTS)}
    crashed: dict[str, int] = {}
    sampler.start()
    submitted_at = time.monotonic()
    try:
        next_kill = time.monotonic() + 1.0  # let the first workers start up
        while True:
            counts = engine.store.counts_by_status()
            if counts.get("completed", 0) == TASKS:
                break
            elapsed = time.monotonic() - started
            assert elapsed < DEADLINE_SECONDS, f"not done after {elapsed:.0f}s: {counts}"
            for n, proc in enumerate(workers):
                if proc.poll() is not None:
                    if n in crashers:
                        crashed[crashers.pop(n)] = proc.returncode
                    workers[n] = spawn()
            plain = [n for n in range(WORKERS) if n not in crashers]
            if time.monotonic() >= next_kill and kills < RANDOM_KILLS and plain:
                n = rng.choice(plain)
                workers[n].send_signal(signal.SIGKILL)
                workers[n].wait()
                kills += 1
                workers[n] = spawn()
                next_kill = time.monotonic() + rng.uniform(0.2, 0.6)
            time.sleep(0.05)
    finally:
        sampler.stop.set()
        sampler.join()
        for proc in workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in workers:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        engine.close()

    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        statuses = conn.execute("SELECT status, COUNT(*) FROM sw_tasks GROUP BY status").fetchall()
        effects = conn.execute("SELECT key, task_id, step, attempts FROM effects").fetchall()
        overlaps = conn.execute("SELECT * FROM lease_overlaps").fetchall()
        leftovers = conn.execute(
            "SELECT (SELECT COUNT(*) FROM sw_outbox), (SELECT COUNT(*) FROM sw_timers)"
        ).fetchone()
        events = conn.execute(
            "SELECT task_id, version, type, body, prev_hash, hash, event_id, at_ms FROM sw_events"
            " ORDER BY task_id, version"
        ).fetchall()

    expected_keys = {f"{tid}/{s}/1" for tid in task_ids for s in ("charge", "ship")}
    done_keys = {str(row[0]) for row in effects}
    tally("crash", f"{WORKERS} workers, {TASKS:,} tasks: {RANDOM_KILLS} random kills and one per crash point",
          backend="postgres", point="random + every point", kills=kills + len(crashed),
          effects_lost=len(expected_keys - done_keys), effects_duplicated=len(done_keys - expected_keys))
    assert statuses == [("completed", TASKS)]
    assert crashed == {point: -signal.SIGKILL for point in CRASH_POINTS}, crashed
    # Each effect once, under the key its command carried on every delivery.
    assert len(effects) == len(expected_keys)
    assert {row[0] for row in effects} == expected_keys
    assert all(row[3] >= 1 for row in effects)
    rerun = sum(row[3] - 1 for row in effects)
    assert rerun >= 1, "no step was re-run: the crash points did not exercise redelivery"
    # No command under two live leases.
    assert sampler.error is None, sampler.error
    assert sampler.samples > 20
    assert sampler.problems == []
    assert overlaps == []
    assert leftovers == (0, 0)
    # Whole, chained logs: submitted, charge reported, ship reported; nothing twice.
    by_task: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for row in events:
        by_task[str(row[0])].append(row)
    assert sorted(by_task) == task_ids
    for tid, rows in by_task.items():
        assert [r[2] for r in rows] == ["TaskSubmitted", "AttemptReported", "AttemptReported"], tid
        prev = GENESIS_HASH
        for _, version, type_, body, prev_hash, h, event_id, at_ms in rows:
            row = RawEvent(tid, version, event_id, type_, body, at_ms, prev_hash, h)
            assert prev_hash == prev and Chain().recompute(row) == h, (tid, version)
            prev = h
    print(
        f"\n{TASKS} tasks, {spawned} worker processes started, {kills} random SIGKILLs + "
        f"{len(crashed)} crash points, {rerun} steps re-run, {sampler.samples} outbox samples, "
        f"submit {submitted_at - t_submit:.1f}s, run {time.monotonic() - started:.1f}s"
    )
