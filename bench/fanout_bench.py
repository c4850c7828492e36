"""statewright's fan-out: what a map step's child task costs, and how soon the parent moves
on once its last child has ended. On the embedded SQLite store (WAL, synchronous=FULL) and,
when a server answers, on PostgreSQL.

    .venv/bin/python bench/fanout_bench.py            # the full run (a minute or two)
    .venv/bin/python bench/fanout_bench.py --quick    # a smoke run
    .venv/bin/python bench/fanout_bench.py --url postgresql://user@host:5432/db   # or --no-pg

(1) Cost per child. One task whose map step runs N children (max_concurrency 32), each a
task of a one-step workflow whose callable returns True, worked by one in-process
``Worker.run(until_idle=True)``: wall time from submit to the parent's end, divided by N.
Beside it, the same N one-step tasks submitted on their own and drained the same way (each
its own submit commit and outcome commit). The difference is what being a child adds: its
start is written in the parent's commit, and its end writes the parent's ChildEnded (and the
next child's start) in the child's own last commit; those commits span several tasks, so they
are not grouped with other outcomes. N = 50 and 200: three rounds each, medians; N = 1000:
one round (the parent keeps every child's record, so its projection grows with N).

(2) Parent pickup. A map step of 8 children (all at once) followed by a code step. Each child's
callable writes ``time.time()`` when it returns; the parent's next step writes it when it
starts. Pickup = next step start - the last child's end: the child's outcome commit (which
also appends ChildEnded to the parent and the parent's next command) plus the claim of that
command. One worker (as shipped: on PostgreSQL it waits on LISTEN/NOTIFY) runs in a thread of
this process. 20 rounds (5 with --quick); median and maximum.

(3) A loop's waves. A loop run (``LoopRunner``, in this process) over N = 24 items whose passes
are child tasks of a one-step workflow (its callable writes ``time.time()`` when it returns),
with one check per pass and one goal oracle, each a ``python -S -c`` command; the check
prints ``time.time()`` as it starts. Per pass: the run's wall time / N, with ``parallel: 1``
and ``parallel: 4`` (3 rounds each, medians). Wave pickup: the first check of a wave starting
- the wave's last pass ending: the last child's outcome commit (which writes the run's
PassEnded line and moves it to CHECKING), the driver taking that up, and the check process
starting; the cost of starting such a process, measured beside it, is printed too.

The header prints a bare SQLite INSERT+COMMIT on the same disk: the figures move with it and
with whatever else the machine is doing. Every figure printed is measured by this run."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_lib import cpu_model, floor_ms_per_step, load_average, statewright_source  # noqa: E402

DEFAULT_PG = os.environ.get("STATEWRIGHT_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def say(text: str = "") -> None:
    print(text, flush=True)


def child_dir(tmp: Path) -> Path:
    d = tmp / "defs"
    d.mkdir(exist_ok=True)
    for name, fn in (("noop-one", "noop"), ("end-one", "child_end")):
        step = f"{{id: work, kind: code, owner: bench, run: {{callable: 'bench_steps:{fn}'}}}}"
        (d / f"{name}.yaml").write_text(f"workflow: {name}\nsteps:\n  - {step}\n", encoding="utf-8")
    (d / "fan.yaml").write_text(
        "workflow: fan\nsteps:\n"
        "  - {id: each, kind: map, owner: bench, workflow: noop-one.yaml, items: input.items, max_concurrency: 32}\n",
        encoding="utf-8")
    (d / "fan-then.yaml").write_text(
        "workflow: fan-then\nsteps:\n"
        "  - {id: each, kind: map, owner: bench, workflow: end-one.yaml, items: input.items, max_concurrency: 8}\n"
        "  - {id: next, kind: code, owner: bench, run: {callable: 'bench_steps:next_after_map'}}\n",
        encoding="utf-8")
    return d


class Target:
    """A place to run: ``fresh()`` gives the URL of an empty database, ``close()`` cleans up."""

    def __init__(self, name: str, fresh: Callable[[], str], close: Callable[[], None]) -> None:
        self.name, self.fresh, self.close = name, fresh, close


def sqlite_target(tmp: Path) -> Target:
    def fresh() -> str:
        return f"sqlite:///{tmp / f'bench-{uuid.uuid4().hex[:8]}.db'}?synchronous=FULL"

    return Target("SQLite (WAL, FULL)", fresh, lambda: None)


def pg_target(server: str) -> Target | None:
    try:
        import psycopg

        with psycopg.connect(server, autocommit=True, connect_timeout=3) as conn:
            version = conn.execute("SHOW server_version").fetchone()
    except Exception as exc:
        say(f"PostgreSQL at {server} not used: {' '.join(str(exc).split())[:120]}")
        return None
    made: list[str] = []

    def fresh() -> str:
        name = f"swfanbench_{uuid.uuid4().hex[:10]}"
        made.append(name)
        return f"{server}{'&' if '?' in server else '?'}schema={name}"

    def close() -> None:
        with psycopg.connect(server, autocommit=True) as conn:
            for name in made:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')

    return Target(f"PostgreSQL {version[0] if version else '?'}", fresh, close)


def engine_on(url: str, tmp: Path) -> Any:
    from statewright import Engine
    from statewright.store import open_store

    return Engine(open_store(url), workspace_root=tmp / "ws" / uuid.uuid4().hex[:8])


def drain(engine: Any) -> None:
    from statewright import Worker

    Worker(engine).run(until_idle=True)


def cost_round(target: Target, defs: Path, n: int, tmp: Path) -> tuple[float, float]:
    """(ms per child of a map step, ms per task of the same tasks on their own)."""
    from statewright import TaskStatus, load_workflow

    engine = engine_on(target.fresh(), tmp)
    try:
        fan = load_workflow(defs / "fan.yaml")
        engine.register(fan)
        t0 = time.perf_counter()
        tid = engine.submit(fan, {"items": list(range(n))})
        drain(engine)
        mapped = time.perf_counter() - t0
        if engine.state(tid).status is not TaskStatus.COMPLETED:
            raise RuntimeError(f"the map task ended {engine.state(tid).status}")
    finally:
        engine.close()
    engine = engine_on(target.fresh(), tmp)
    try:
        one = load_workflow(defs / "noop-one.yaml")
        engine.register(one)
        t0 = time.perf_counter()
        for i in range(n):
            engine.submit(one, {"item": i, "index": i})
        drain(engine)
        alone = time.perf_counter() - t0
    finally:
        engine.close()
    return mapped / n * 1000, alone / n * 1000


def pickup_rounds(target: Target, defs: Path, rounds: int, tmp: Path) -> list[float]:
    """Milliseconds from the last child's end to the parent's next step, per round."""
    from statewright import TaskStatus, Worker, load_workflow

    engine = engine_on(target.fresh(), tmp)
    wf = load_workflow(defs / "fan-then.yaml")
    out: list[float] = []
    stop = threading.Event()
    worker = Worker(engine)
    thread = threading.Thread(target=lambda: worker.run(until=stop.is_set), daemon=True)
    thread.start()
    try:
        for r in range(rounds):
            folder = tmp / f"round-{uuid.uuid4().hex[:8]}"
            folder.mkdir()
            tid = engine.submit(wf, {"items": [{"out": str(folder)}] * 8, "out": str(folder)})
            deadline = time.monotonic() + 60
            while (status := engine.state(tid).status) is not TaskStatus.COMPLETED:
                if time.monotonic() > deadline or status in (TaskStatus.HALTED, TaskStatus.CANCELLED):
                    raise RuntimeError(f"round {r}: the task is {status}")
                time.sleep(0.01)
            ends = [float(p.read_text()) for p in folder.glob("child-*.end")]
            started = float((folder / "next.start").read_text())
            out.append((started - max(ends)) * 1000)
    finally:
        stop.set()
        thread.join(timeout=30)
        engine.close()
    return out


LOOP_ITEMS = 24


def loop_round(target: Target, defs: Path, parallel: int, tmp: Path) -> tuple[float, list[float]]:
    """(ms per pass, wave pickups in ms) of one loop run with ``parallel`` passes at once."""
    import yaml

    from statewright.loop.definition import load_loop
    from statewright.loop.runner import LoopRunner
    from statewright.loop.store import LoopStore
    from statewright.machine.loop.model import LoopStatus

    root = tmp / f"loop-{uuid.uuid4().hex[:8]}"
    out = root / "out"
    out.mkdir(parents=True)
    step = "{id: work, kind: code, owner: bench, run: {callable: 'bench_steps:pass_end'}}"
    (root / "pass.yaml").write_text(f"workflow: loop-pass\nsteps:\n  - {step}\n", encoding="utf-8")
    items = "".join(f'{{"id": "i{n:02d}", "out": "{out}"}}\n' for n in range(LOOP_ITEMS))
    (root / "backlog.jsonl").write_text(items, encoding="utf-8")
    stamp = [sys.executable, "-S", "-c", "import time; print(repr(time.time()))"]
    oracle = {"name": "ok", "command": [sys.executable, "-S", "-c", "pass"], "timeout": "60s"}
    loop = {"loop": "bench", "source": {"jsonl": "backlog.jsonl"}, "workflow": "pass.yaml",
            "check": [{"name": "stamp", "command": stamp, "timeout": "60s"}],
            "goal": {"all_items_closed": True, "oracles": [oracle]},
            "budgets": {"passes": 100}, "parallel": parallel}
    (root / "loop.yaml").write_text(yaml.safe_dump(loop), encoding="utf-8")
    url = target.fresh()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    with LoopStore.open(url) as store:
        t0 = time.perf_counter()
        outcome = LoopRunner(load_loop(root / "loop.yaml"), store, env=env).run()
        wall = time.perf_counter() - t0
        if outcome.status is not LoopStatus.DONE:
            raise RuntimeError(f"the loop run ended {outcome.status}: {outcome.reason}")
        lines = store.lines(outcome.run_id)
    pickups: list[float] = []
    wave: list[str] = []
    starts: list[float] = []
    for ln in [*lines, None]:
        if ln is None or "pick" in ln.written:
            if wave and starts:
                ends = [float(p.read_text()) for i in wave for p in out.glob(f"pass-{i}-*.end")]
                pickups.append((min(starts) - max(ends)) * 1000)
            if ln is not None:
                wave, starts = list(ln.written.get("wave") or [ln.written["pick"]]), []
            continue
        if ln.event_type == "CheckFinished":
            starts += [float(e["output"]) for e in ln.written.get("evidence", [])]
    return wall / LOOP_ITEMS * 1000, pickups


def spawn_ms() -> float:
    """Median milliseconds to start and end ``python -S -c pass`` (what each check costs)."""
    import subprocess

    runs = []
    for _ in range(9):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-S", "-c", "pass"], check=True)
        runs.append((time.perf_counter() - t0) * 1000)
    return statistics.median(runs)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--url", default=DEFAULT_PG)
    parser.add_argument("--no-pg", action="store_true")
    args = parser.parse_args(argv)
    sizes = {20: 1, 100: 1} if args.quick else {50: 3, 200: 3, 1000: 1}  # N -> rounds
    pickups = 5 if args.quick else 20

    started = time.time()
    say(f"statewright fan-out benchmark, {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(started))}")
    say(f"machine: {os.cpu_count()} CPUs, {platform.machine()}, {cpu_model()}; python {platform.python_version()}")
    say(f"statewright: {statewright_source()}")
    say(f"load average at start: {load_average()}")
    with tempfile.TemporaryDirectory(prefix="swfanbench-") as tmp_name:
        tmp = Path(tmp_name)
        defs = child_dir(tmp)
        floor = statistics.median(floor_ms_per_step(tmp / f"floor-{i}.db", 200) for i in range(3))
        say(f"disk now: a bare SQLite INSERT+COMMIT (WAL, FULL) takes {floor:.3f} ms (median of 3 x 200)")
        targets = [sqlite_target(tmp)]
        pg = None if args.no_pg else pg_target(args.url)
        if pg is not None:
            targets.append(pg)
        try:
            for target in targets:
                say()
                say(f"{target.name}")
                say("  (1) cost per child: a map step of N one-step children (max_concurrency 32) vs the same "
                    "N tasks on their own; one in-process worker; median of the rounds")
                for n, rounds in sizes.items():
                    runs = [cost_round(target, defs, n, tmp) for _ in range(rounds)]
                    mapped = statistics.median(r[0] for r in runs)
                    alone = statistics.median(r[1] for r in runs)
                    say(f"      N={n:>5}: {mapped:6.2f} ms per child   on their own {alone:6.2f} ms per task   "
                        f"a child adds {mapped - alone:+6.2f} ms   (rounds: "
                        + ", ".join(f"{m:.2f}/{a:.2f}" for m, a in runs) + ")")
                got = pickup_rounds(target, defs, pickups, tmp)
                say(f"  (2) parent pickup, last child's end -> the parent's next step starting, 8 children, "
                    f"{pickups} rounds:")
                say(f"      median {statistics.median(got):.1f} ms, min {min(got):.1f} ms, max {max(got):.1f} ms")
                say(f"  (3) a loop over {LOOP_ITEMS} items, passes as child tasks, a check and an oracle per run "
                    f"as python -S processes (one costs {spawn_ms():.1f} ms to start and end here):")
                for parallel in (1, 4):
                    runs = [loop_round(target, defs, parallel, tmp) for _ in range(1 if args.quick else 3)]
                    per_pass = statistics.median(r[0] for r in runs)
                    waves = [p for r in runs for p in r[1]]
                    say(f"      parallel {parallel}: {per_pass:6.1f} ms per pass (rounds: "
                        + ", ".join(f"{r[0]:.1f}" for r in runs) + "); wave pickup, last pass's end -> the "
                        f"wave's first check starting: median {statistics.median(waves):.1f} ms, "
                        f"max {max(waves):.1f} ms ({len(waves)} waves)")
        finally:
            for target in targets:
                target.close()
    say(f"\n(total {time.time() - started:.0f} s; load average at the end: {load_average()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
