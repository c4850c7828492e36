"""statewright on SQLite: cost per durable step against a hand-written floor, throughput,
worker memory, cost as the database grows, import time and approval pickup.

    .venv/bin/python bench/sqlite_bench.py            # the full run (a few minutes)
    .venv/bin/python bench/sqlite_bench.py --quick    # a smoke run (small sizes, few rounds)

Every figure printed is measured by this run; bench/README.md explains each one."""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is not a package

import bench_lib as lib


@dataclass(frozen=True)
class Plan:
    a_tasks: int
    a_rounds: int
    b_tasks: int
    c_tasks: int
    d_sizes: tuple[int, ...]
    d_tasks: int
    d_rounds: int
    e_runs: int
    f_rounds: int


FULL = Plan(a_tasks=10, a_rounds=15, b_tasks=1000, c_tasks=200, d_sizes=(1_000, 10_000, 100_000),
            d_tasks=20, d_rounds=15, e_runs=9, f_rounds=20)
QUICK = Plan(a_tasks=4, a_rounds=3, b_tasks=150, c_tasks=40, d_sizes=(1_000, 10_000),
             d_tasks=4, d_rounds=3, e_runs=3, f_rounds=5)

GOAL_RATIO = 1.5
GOAL_TPS = 5_000
GOAL_GROWTH = 0.20
GOAL_RSS_MIB = 40.0
GOAL_IMPORT_S = 0.2
GOAL_PICKUP_MS = 50.0


def say(text: str = "") -> None:
    print(text, flush=True)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def measure_a(tmp: Path, plan: Plan) -> tuple[float, float, float]:
    say(f"(a) cost per durable step: WAL + synchronous=FULL, 1 worker, {lib.STEPS} python-callable code")
    say(f"    steps per task via Engine + Worker + executors.run_code; {plan.a_rounds} rounds of "
        f"{plan.a_tasks} tasks ({plan.a_tasks * lib.STEPS} steps), each next to a floor round of as many")
    say("    INSERT+COMMITs; figures are medians over rounds, the ratio is the median of the per-round")
    say("    ratios. Submits happen before the clock starts.")
    engine = lib.open_engine(tmp / "a.db", "FULL")
    wf = lib.eight_step_workflow()
    lib.engine_run(engine, wf, 2)  # warm-up: imports, definition, first pages
    lib.floor_ms_per_step(tmp / "a_floor.db", 16, "FULL")
    floors, engines, with_submit, cpu, singles = [], [], [], [], []
    for _ in range(plan.a_rounds):
        floors.append(lib.floor_ms_per_step(tmp / "a_floor.db", plan.a_tasks * lib.STEPS, "FULL"))
        run = lib.engine_run(engine, wf, plan.a_tasks)
        engines.append(run.ms_per_step)
        with_submit.append(run.ms_per_step_with_submit)
        cpu.append(run.cpu_ms_per_step)
        singles.append(lib.engine_run(engine, wf, plan.a_tasks, batch=1).ms_per_step)
    engine.close()
    floor, eng = lib.median(floors), lib.median(engines)
    ratio = lib.median(e / f for e, f in zip(engines, floors, strict=True))
    single_ratio = lib.median(e / f for e, f in zip(singles, floors, strict=True))
    say(f"    floor  (one INSERT+COMMIT per step):      {floor:.3f} ms/step   rounds: {lib.fmt_list(floors, 3)}")
    say(f"    engine (as shipped: group commit):        {eng:.3f} ms/step   rounds: {lib.fmt_list(engines, 3)}")
    say(f"    engine, submits included:                 {lib.median(with_submit):.3f} ms/step")
    say(f"    engine CPU time (this process):           {lib.median(cpu):.3f} ms/step")
    say(f"    ratio engine / floor:                     {ratio:.2f}x")
    say(f"    for comparison, Worker(batch=1), every outcome its own commit: {lib.median(singles):.3f} ms/step,"
        f" {single_ratio:.2f}x the floor")
    return floor, eng, ratio


def measure_b(tmp: Path, plan: Plan) -> float:
    say(f"(b) step transitions per second, WAL + synchronous=NORMAL: {plan.b_tasks} tasks x {lib.STEPS} steps")
    say("    submitted first, then drained by N worker processes released together; a transition is")
    say("    one applied step outcome (AttemptReported); span = first worker start to last worker end.")
    best = 0.0
    for procs in (1, 2):
        db = tmp / f"b{procs}.db"
        engine = lib.open_engine(db, "NORMAL")
        wf = lib.eight_step_workflow()
        for i in range(plan.b_tasks):
            engine.submit(wf, {"n": i})
        engine.close()
        res = lib.run_workers(db, "NORMAL", procs)
        expected = plan.b_tasks * lib.STEPS
        if res["commands"] != expected:
            raise RuntimeError(f"workers performed {res['commands']} commands, expected {expected}")
        tps = res["commands"] / res["span_seconds"]
        split = "/".join(str(n) for n in res["per_process"])
        cpu_ms = res["cpu_seconds"] * 1000 / res["commands"]
        say(f"    {procs} worker process(es): {tps:,.0f} transitions/s  ({res['commands']} in "
            f"{res['span_seconds']:.2f} s; per process {split}; worker CPU {cpu_ms:.3f} ms/transition)")
        best = tps if procs == 2 else best
    return best


def measure_c(tmp: Path, plan: Plan) -> float:
    say(f"(c) peak RSS (VmHWM) of a worker process: WAL + FULL, draining {plan.c_tasks} tasks x {lib.STEPS} steps")
    db = tmp / "c.db"
    engine = lib.open_engine(db, "FULL")
    wf = lib.eight_step_workflow()
    for i in range(plan.c_tasks):
        engine.submit(wf, {"n": i})
    engine.close()
    res = lib.run_workers(db, "FULL", 1)
    bare = lib.bare_interpreter_hwm_kb()
    plain = lib.bare_interpreter_hwm_kb("statewright")
    with_executors = lib.bare_interpreter_hwm_kb("statewright", "statewright.executors")
    ready, done = res["hwm_kb_ready"][0], res["hwm_kb_done"][0]
    say(f"    bare interpreter (python -c):               {bare / 1024:.1f} MiB")
    say(f"    python -c 'import statewright':             {plain / 1024:.1f} MiB")
    say(f"    ... and statewright.executors (1st step):   {with_executors / 1024:.1f} MiB")
    say(f"    worker after imports + open, before work:  {ready / 1024:.1f} MiB")
    say(f"    worker peak after {res['commands']} steps:              {done / 1024:.1f} MiB")
    return float(done) / 1024


@dataclass(frozen=True)
class SizeResult:
    engine_ms: float  # median ms/step over the rounds
    cpu_ms: float  # median CPU ms/step of this process over the rounds


def measure_d(tmp: Path, plan: Plan) -> dict[int, SizeResult]:
    sizes = ", ".join(f"{n:,}" for n in plan.d_sizes)
    say(f"(d) (a) with {sizes} finished tasks already stored, one database per size: WAL + FULL, 1 worker.")
    say(f"    {plan.d_rounds} rounds; each round runs {plan.d_tasks} tasks on every database in turn (rotating the")
    say("    order) and one floor round, so a slow spell of the disk hits every size alike; medians.")
    say(f"    Pre-fill: direct INSERTs of rows cloned from a real finished {lib.STEPS}-step task (new ids made")
    say("    as the engine makes them, for earlier submit times; recomputed hash chains:")
    say(f"    1 sw_tasks + {lib.STEPS + 1} sw_events rows each).")
    wf = lib.eight_step_workflow()
    engines = {}
    for size in plan.d_sizes:
        db = tmp / f"d{size}.db"
        engine = engines[size] = lib.open_engine(db, "FULL")
        template = lib.template_task(engine, wf)
        secs = lib.prefill(db, template, size - lib.task_count(db))
        mib = sum(f.stat().st_size for f in tmp.glob(f"d{size}.db*")) / 2**20
        say(f"    {size:>7,} tasks stored: db {mib:,.0f} MiB, pre-fill {secs:.1f} s")
    floors: list[float] = []
    costs: dict[int, list[float]] = {n: [] for n in plan.d_sizes}
    cpus: dict[int, list[float]] = {n: [] for n in plan.d_sizes}
    for r in range(plan.d_rounds):
        floors.append(lib.floor_ms_per_step(tmp / "d_floor.db", plan.d_tasks * lib.STEPS, "FULL"))
        order = plan.d_sizes[r % len(plan.d_sizes):] + plan.d_sizes[:r % len(plan.d_sizes)]
        for size in order:
            run = lib.engine_run(engines[size], wf, plan.d_tasks)
            costs[size].append(run.ms_per_step)
            cpus[size].append(run.cpu_ms_per_step)
    for engine in engines.values():
        engine.close()
    out: dict[int, SizeResult] = {}
    for size in plan.d_sizes:
        res = out[size] = SizeResult(lib.median(costs[size]), lib.median(cpus[size]))
        say(f"    {size:>7,} tasks stored: engine {res.engine_ms:.3f} ms/step (CPU {res.cpu_ms:.3f})"
            f"   rounds: {lib.fmt_list(costs[size], 3)}")
    say(f"    floor alongside: {lib.median(floors):.3f} ms/step   rounds: {lib.fmt_list(floors, 3)}")
    return out


def measure_e(plan: Plan) -> float:
    runs = lib.import_seconds(plan.e_runs)
    med = lib.median(runs)
    say(f"(e) import statewright in a fresh interpreter, {plan.e_runs} runs: median {med:.3f} s  "
        f"(runs: {lib.fmt_list(runs, 3)})")
    return med


def measure_f(tmp: Path, plan: Plan) -> float:
    say(f"(f) approval pickup, WAL + FULL: an idle worker in another process; {plan.f_rounds} rounds of submit,")
    say("    park at a human step, approve at a random moment; from approve() returning to the next")
    say("    step's callable starting (time.time() on both sides)")
    picks = lib.approval_pickups(tmp / "f.db", plan.f_rounds)
    med = lib.median(picks)
    say(f"    median {med:.1f} ms, min {min(picks):.1f} ms, max {max(picks):.1f} ms")
    return max(picks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: small sizes, few rounds")
    parser.add_argument("--tmp-dir", default=None,
                        help="where the temporary databases go (default: the system temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    base = Path(args.tmp_dir) if args.tmp_dir else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="swbench-", dir=base))
    same = os.stat(tmp).st_dev == os.stat(lib.REPO).st_dev
    say(f"statewright SQLite benchmark{' (--quick)' if args.quick else ''}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    say(f"machine: {os.cpu_count()} CPUs ({len(os.sched_getaffinity(0))} usable), {platform.machine()}, "
        f"{lib.cpu_model()}")
    say(f"python {platform.python_version()}, SQLite {sqlite3.sqlite_version}")
    say(f"statewright: {lib.statewright_source()}")
    say(f"temp dir: {tmp}  [{lib.filesystem_of(tmp)}; "
        f"{'same' if same else 'NOT the same'} filesystem as the repo]")
    say(f"load average at start: {lib.load_average()}")
    say()
    started = time.perf_counter()
    try:
        floor, eng, ratio = measure_a(tmp, plan)
        say()
        tps = measure_b(tmp, plan)
        say()
        rss = measure_c(tmp, plan)
        say()
        sizes = measure_d(tmp, plan)
        say()
        imp = measure_e(plan)
        say()
        pick = measure_f(tmp, plan)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    first = plan.d_sizes[0]
    growth = max(abs(r.engine_ms / sizes[first].engine_ms - 1) for r in sizes.values())
    by_size = ", ".join(f"{r.engine_ms:.3f} at {n:,}" for n, r in sizes.items())
    say()
    say("GOALS")
    say(f"  per-step cost <= {GOAL_RATIO}x the floor            {ratio:6.2f}x ({eng:.3f} vs {floor:.3f} ms)   "
        f"{verdict(ratio <= GOAL_RATIO)}")
    say(f"  >= {GOAL_TPS:,} transitions/s, NORMAL, 2 workers  {tps:8,.0f}/s                     "
        f"{verdict(tps >= GOAL_TPS)}")
    say(f"  per-step cost within {GOAL_GROWTH:.0%} of the {first:,}-task figure   {growth:7.1%} max deviation"
        f" (ms/step: {by_size})   {verdict(growth <= GOAL_GROWTH)}")
    say(f"  worker peak RSS < {GOAL_RSS_MIB:.0f} MiB                 {rss:7.1f} MiB                   "
        f"{verdict(rss < GOAL_RSS_MIB)}")
    say(f"  import statewright < {GOAL_IMPORT_S} s              {imp:7.3f} s                     "
        f"{verdict(imp < GOAL_IMPORT_S)}")
    say(f"  approval pickup < {GOAL_PICKUP_MS:.0f} ms, every round     {pick:7.1f} ms (max)              "
        f"{verdict(pick < GOAL_PICKUP_MS)}")
    say(f"(total {time.perf_counter() - started:.0f} s; load average at the end: {lib.load_average()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
