"""The peer benchmark: one 8-step workload on statewright, a hand-written floor, LangGraph,
DBOS and Burr, interleaved round by round in one run; prints one table.

    python bench/peers/run.py --setup          # make bench/peers/.venv with the pinned peers
    python bench/peers/run.py [--rounds 3] [--tasks 30]

Each round runs every peer once, in a fresh process on a fresh database directory, in an order
that rotates from round to round. A process runs one task (its first-task time: import, open,
first task) and then ``--tasks`` more, each timed alone. Figures are medians over rounds of each
process's median task; the ratio to the floor is taken within each round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PEERS_VENV = HERE / ".venv"
STEPS = 8
# name, module, runs in the peers' environment
PEERS = [
    ("floor: INSERT+COMMIT per step", "floor", False),
    ("statewright start_task + approve_and_run", "statewright_peer", False),
    ("statewright long-running Worker", "statewright_worker_peer", False),
    ("Burr, SQLitePersister", "burr_peer", True),
    ("DBOS on SQLite (recv/send pause)", "dbos_peer", True),
    ("LangGraph, SqliteSaver, sync", "langgraph_peer", True),
]


def setup() -> int:
    subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
    pip = [str(PEERS_VENV / "bin" / "pip"), "install", "-q"]
    subprocess.run([*pip, "-r", str(HERE / "requirements.txt")], check=True)
    print(f"peers installed in {PEERS_VENV}")
    return 0


def run_peer(module: str, python: str, tasks: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"peer-{module}-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(HERE), "PYTHONDONTWRITEBYTECODE": "1"}
        proc = subprocess.run([python, str(HERE / f"{module}.py"), tmp, str(tasks)], env=env,
                              capture_output=True, text=True, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{module} failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(lines[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setup", action="store_true", help="install the pinned peers and exit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=30, help="timed tasks per process after the first")
    parser.add_argument("--only", default="", help="comma-separated modules to run (default: all)")
    args = parser.parse_args()
    if args.setup:
        return setup()
    peers_python = str(PEERS_VENV / "bin" / "python")
    chosen = [p for p in PEERS if not args.only or p[1] in args.only.split(",")]
    if any(in_venv for _, _, in_venv in chosen) and not Path(peers_python).exists():
        print(f"no peers environment at {PEERS_VENV}: run {Path(__file__).name} --setup first", file=sys.stderr)
        return 2
    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')}, {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, load {os.getloadavg()[0]:.2f}")
    print(f"# {args.rounds} rounds x (1 first task + {args.tasks} timed tasks) per peer, {STEPS} steps per task")
    results: dict[str, list[dict]] = {m: [] for _, m, _ in chosen}
    for r in range(args.rounds):
        order = chosen[r % len(chosen):] + chosen[: r % len(chosen)]
        for _, module, in_venv in order:
            results[module].append(run_peer(module, peers_python if in_venv else sys.executable, args.tasks))
    print(f"# load at the end {os.getloadavg()[0]:.2f}")
    floor_by_round = [statistics.median(x["task_wall_s"]) for x in results.get("floor", [])]
    header = ("peer", "us/step", "x floor", "cpu/wall", "write commits/task", "read-only tx/task",
              "statements/task", "peak RSS MB", "first task ms")
    rows = []
    for name, module, _ in chosen:
        runs = results[module]
        per_step = [statistics.median(x["task_wall_s"]) / STEPS * 1e6 for x in runs]
        pairs = zip(runs, floor_by_round, strict=True) if floor_by_round else ()
        ratio = statistics.median(statistics.median(x["task_wall_s"]) / f for x, f in pairs) if pairs else float("nan")
        cpu_wall = statistics.median(sum(x["task_cpu_s"]) / sum(x["task_wall_s"]) for x in runs)
        rows.append((name, f"{statistics.median(per_step):,.0f}", f"{ratio:.1f}", f"{cpu_wall:.2f}",
                     f"{statistics.median(x['write_commits_per_task'] for x in runs):g}",
                     f"{statistics.median(x['read_transactions_per_task'] for x in runs):g}",
                     f"{statistics.median(x['statements_per_task'] for x in runs):g}",
                     f"{statistics.median(x['peak_rss_kb'] for x in runs) / 1024:.0f}",
                     f"{statistics.median(x['first_task_ms'] for x in runs):,.0f}"))
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
