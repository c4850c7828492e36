"""A loop with ``parallel: 4`` over 20 items on one PostgreSQL database, its passes child tasks
worked by the loop's own process and by 3 worker processes, while workers are SIGKILLed at
random and replaced, and the loop's process is SIGKILLed twice: the first time a ``loop run``
is started again and resumes the run; the second time nobody starts one, and a worker takes
the run up once the dead process's lease on it runs out (``loop run --lease 2s``).

Checked afterwards: a worker process drove the run to its end; the run ended DONE with every
item closed; each child task's effect (a row keyed by its idempotency key) happened at most
once, and exactly once for every child that completed; each item was closed by exactly one
completed child; every pass's end is in the run's record; nothing is left in the outbox; and
``verify`` finds every log whole, the loop run's among them.

As in test_pg_workers.py, the fault injector is a timed loop by nature (kill, replace, look
again); it waits on processes and the database, never on a sleep to make a result true."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import yaml

from faults.fault_steps import create_effects
from statewright import Engine
from statewright.loop.store import LoopStore
from statewright.machine.loop.model import LoopStatus
from statewright.runtime.verify import verify_all
from statewright.store import open_store
from statewright.store.postgres import split_url
from store.backends import fresh_pg_schema

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
ITEMS = 20
PARALLEL = 4
WORKERS = 3
DEADLINE_SECONDS = 200.0  # a failure threshold: the run takes 15-40 s on 2 busy, shared cores
WORKER_KILLS = 4
DRIVER_KILLS = 2

PASS_WORKFLOW = """\
workflow: wave-pass
steps:
  - {id: work, kind: code, owner: ops, run: {callable: "fault_steps:record_after_work"}}
"""


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_pg_schema("swloop") as (url, _name):
        yield url


def _loop_file(root: Path) -> Path:
    (root / "wave-pass.yaml").write_text(PASS_WORKFLOW, encoding="utf-8")
    (root / "backlog.jsonl").write_text("".join(json.dumps({"id": f"item-{n:02d}"}) + "\n" for n in range(ITEMS)),
                                        encoding="utf-8")
    ok = [sys.executable, "-c", "pass"]
    loop = {
        "loop": "wave",
        "source": {"jsonl": "backlog.jsonl"},
        "workflow": "wave-pass.yaml",
        "check": [{"name": "done", "command": ok, "timeout": "60s"}],
        "goal": {"all_items_closed": True, "oracles": [{"name": "all", "command": ok, "timeout": "60s"}]},
        "budgets": {"passes": 80},
        "parallel": PARALLEL,
        "attempts_per_item": 6,
        "restart_limit": 20,
        "stuck_after": 40,
    }
    path = root / "loop.yaml"
    path.write_text(yaml.safe_dump(loop, sort_keys=False), encoding="utf-8")
    return path


def test_a_wave_loop_survives_killed_workers_and_a_killed_loop_process(pg_url: str, tmp_path: Path) -> None:
    conninfo, schema = split_url(pg_url)
    assert schema is not None
    path = _loop_file(tmp_path)
    open_store(pg_url).close()  # the schema and statewright's tables
    create_effects(conninfo, schema)
    env = {
        **os.environ,
        "FAULTS_PG_CONNINFO": conninfo,
        "FAULTS_PG_SCHEMA": schema,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    for name in ("STATEWRIGHT_CRASH_AT", "STATEWRIGHT_LOOP_CRASH_AT"):
        env.pop(name, None)
    logs = tmp_path / "logs"
    logs.mkdir()
    started_procs = Counter[str]()

    def spawn(kind: str) -> subprocess.Popen[bytes]:
        started_procs[kind] += 1
        if kind == "worker":
            argv = [sys.executable, str(HERE / "pg_worker.py"), pg_url, str(tmp_path / "ws"), "60"]
        else:
            argv = [sys.executable, "-m", "statewright.loop", "run", str(path), "--db", pg_url, "--lease", "2s"]
        with (logs / f"{kind}-{started_procs[kind]}.log").open("wb") as log:
            return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)

    def run_status() -> tuple[str, LoopStatus] | None:
        with LoopStore.open(pg_url) as store:
            run = store.latest_run("wave")
            return None if run is None else (run.run_id, run.status)

    rng = random.Random(20261203)
    workers = [spawn("worker") for _ in range(WORKERS)]
    worker_pids = {w.pid for w in workers}
    driver: subprocess.Popen[bytes] | None = spawn("driver")
    worker_kills = driver_kills = 0
    started = time.monotonic()
    next_kill = started + 1.0
    # The loop process is killed twice once its run exists (a start slowed by a loaded machine
    # must not be killed before it made one): early, as the run takes longer than that.
    driver_kill_at: list[float] = []
    seen_run = False
    try:
        while True:
            elapsed = time.monotonic() - started
            assert elapsed < DEADLINE_SECONDS, f"not done after {elapsed:.0f}s: {run_status()}"
            status = run_status()
            if status is not None and status[1].is_terminal:
                break
            if status is not None and not seen_run:
                seen_run = True
                driver_kill_at = [time.monotonic() + 0.5, time.monotonic() + 2.5]
            if driver is not None and driver.poll() is not None:
                assert driver.returncode == 0, (driver.returncode, _tail(logs, "driver"))
                driver = None  # it ended the run, or it sleeps: nothing to start again
            for n, proc in enumerate(workers):
                if proc.poll() is not None:
                    workers[n] = spawn("worker")
                    worker_pids.add(workers[n].pid)
            if driver is not None and driver_kill_at and time.monotonic() >= driver_kill_at[0]:
                driver_kill_at.pop(0)
                driver.send_signal(signal.SIGKILL)
                driver.wait()
                driver_kills += 1
                driver = spawn("driver") if driver_kill_at else None  # the second time: the workers' turn
            if time.monotonic() >= next_kill and worker_kills < WORKER_KILLS:
                n = rng.randrange(len(workers))
                workers[n].send_signal(signal.SIGKILL)
                workers[n].wait()
                worker_kills += 1
                workers[n] = spawn("worker")
                worker_pids.add(workers[n].pid)
                next_kill = time.monotonic() + rng.uniform(0.5, 2.0)
            time.sleep(0.05)
    finally:
        procs = [*workers, *([driver] if driver is not None else [])]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    engine = Engine(open_store(pg_url))
    try:
        status = run_status()
        assert status is not None
        run_id, final = status
        assert final is LoopStatus.DONE, (final, _tail(logs, "driver"))
        with LoopStore.open(pg_url) as store:
            run = store.run(run_id)
            lines = store.lines(run_id)
        assert {i.status for i in run.state.items} == {"closed"} and len(run.state.items) == ITEMS
        assert driver_kills == DRIVER_KILLS and run.owner_pid in worker_pids, (run.owner_pid, driver_kills)
        kids = engine.store.children(f"loop-run-{run_id}")
        states = {k.task_id: engine.state(k.task_id) for k in kids}
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{schema}"')
            effects = dict(conn.execute("SELECT key, attempts FROM effects").fetchall())
            leftovers = conn.execute("SELECT COUNT(*) FROM sw_outbox").fetchone()
        completed = [t for t, s in states.items() if s.status == "completed"]
        # Every effect is a child's, once under its key; every completed child did its effect.
        assert set(effects) <= {f"{t}/work/1" for t in states}
        assert {f"{t}/work/1" for t in completed} <= set(effects)
        closed_by = Counter(states[t].input["item"]["id"] for t in completed)
        assert closed_by == dict.fromkeys((f"item-{n:02d}" for n in range(ITEMS)), 1), closed_by
        ended = {ln.written.get("task") for ln in lines if ln.event_type == "PassEnded"}
        assert set(completed) <= ended
        assert leftovers == (0,)
        count, findings = verify_all(engine)
        assert findings == [] and count == len(states) + 1  # the children and the loop run
        waves = [ln.written.get("wave") for ln in lines if "pick" in ln.written]
        assert max(len(w or [1]) for w in waves) == PARALLEL
    finally:
        engine.close()
    rerun = sum(int(a) - 1 for a in effects.values())
    print(f"\n{ITEMS} items, {len(states)} pass tasks ({len(completed)} completed), {started_procs['worker']} workers"
          f" and {started_procs['driver']} loop processes started, {worker_kills} worker and {driver_kills} loop"
          f" SIGKILLs, {rerun} steps re-run, run {time.monotonic() - started:.1f}s")


def _tail(logs: Path, kind: str) -> str:
    newest = sorted(logs.glob(f"{kind}-*.log"), key=lambda p: p.stat().st_mtime)
    return newest[-1].read_text(errors="replace")[-2000:] if newest else ""
