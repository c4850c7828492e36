"""How long the web console takes to render a long task's page.

    .venv/bin/python bench/console_bench.py [--passes N] [--rounds R]

Two tasks on a SQLite database (the embedded default), made by a real worker: one at a wait
step whose check never passes (500 checks: 1,000 events), and one whose check loops back to
an ai step N times (2N attempts, each with its brief rebuilt by replaying the log). Each page
is fetched R times over HTTP (Starlette's TestClient, signed in through /login): the median
and the slowest are printed, with the task's event and attempt counts, and the median CPU
time of the process (client and server both; on a busy machine it is the steadier figure)."""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

VERDICT = {"type": "object", "properties": {"approved": {"type": "boolean"}, "summary": {"type": "string"}},
           "required": ["approved"], "additionalProperties": False}


def workflows(passes: int) -> tuple[Any, Any]:
    from statewright.definition.loader import workflow_from_dict

    polling = workflow_from_dict({"workflow": "bench-polling", "steps": [
        {"id": "poll", "kind": "wait", "owner": "ops", "check": {"callable": "bench_steps:never"},
         "every": "1s", "max_checks": 500}]}, "<bench-polling>")
    looping = workflow_from_dict({"workflow": "bench-looping", "steps": [
        {"id": "work", "kind": "ai", "owner": "bots", "output_schema": VERDICT,
         "agent": {"type": "python", "callable": "bench_steps:agree"}},
        {"id": "check", "kind": "code", "owner": "ci", "run": {"callable": "bench_steps:never"},
         "on_failure": {"loop_back": "work", "max_attempts": passes}}]}, "<bench-looping>")
    return polling, looping


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=100, help="loop-backs of the second task")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    from starlette.testclient import TestClient

    from statewright.runtime.clock import FakeClock
    from statewright.runtime.engine import Engine
    from statewright.runtime.worker import Worker
    from statewright.server import create_app
    from statewright.store import open_store

    tmp = Path(tempfile.mkdtemp(prefix="console-bench-"))
    engine = Engine(open_store(f"sqlite:///{tmp / 'state.db'}"), clock=FakeClock(), workspace_root=tmp / "ws")
    admin = engine.users.authenticate(engine.users.bootstrap("root").token)
    engine.users.add(admin, "ops", ("operator",))
    token = engine.users.issue_token(admin, "ops").token
    polling, looping = workflows(args.passes)
    started = time.monotonic()
    polled = engine.submit(polling, {})
    Worker(engine).run(until=lambda: engine.state(polled).terminal)
    looped = engine.submit(looping, {})
    Worker(engine).run(until_idle=True)
    built = time.monotonic() - started
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, Python {platform.python_version()}, "
          f"{args.rounds} rounds; tasks made in {built:.1f} s; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    app = create_app(lambda: engine)
    with TestClient(app) as client:
        form = client.get("/login").text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)  # type: ignore[union-attr]
        client.post("/login", data={"token": token, "csrf_token": csrf})
        for tid in (polled, looped):
            st = engine.state(tid)
            times, cpu = [], []
            for _ in range(args.rounds):
                t0, c0 = time.perf_counter(), time.process_time()
                page = client.get(f"/tasks/{tid}")
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                if page.status_code != 200:
                    raise SystemExit(f"GET /tasks/{tid}: {page.status_code}")
            print(f"{st.workflow.name}: {len(engine.events(tid))} events, {len(st.attempts)} attempts, "
                  f"{len(page.text) // 1024} KiB of HTML: median {statistics.median(times) * 1000:.0f} ms, "
                  f"slowest {max(times) * 1000:.0f} ms (CPU: median {statistics.median(cpu) * 1000:.0f} ms)")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
