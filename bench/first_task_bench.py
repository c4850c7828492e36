"""The first task of a new process: how long a fresh Python takes to import statewright, to
import the engine API, and to run its first task.

    python bench/first_task_bench.py [N]     # N fresh processes (default 9), prints medians

Each child process times, from its first line (the interpreter already started):
``import statewright``; then ``from statewright import Engine, WorkflowBuilder, start_task,
approve_and_run``; then open a new SQLite store, build the peer workload's workflow
(implement -> check -> review -> approve -> merge, bench/peers/statewright_peer.py) and
``start_task`` it to the approval, where it parks. No users are bootstrapped: the target is
what every script pays before its first step, not the account set-up. ``first_task_ms`` is
the total from the child's first line to the parked task. The parent prints the median and
the range of each figure over the N processes, twice. ``its_stdlib_modules_ms`` is what the
standard library alone costs: a second fresh process imports only the standard modules the
first one loaded for its task (in the order it loaded them), and nothing of statewright.

- without bytecode cache: ``PYTHONDONTWRITEBYTECODE=1`` and no ``__pycache__`` beside the
  sources (a checkout run with that setting), so every statewright module is compiled from
  source in every process; the standard library's cached bytecode is used as usual;
- with bytecode cache: the ``.pyc`` files an installed package has (pip writes them at
  install), kept under a temporary ``PYTHONPYCACHEPREFIX`` and written by one untimed process.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

CHILD = r"""
import time
t0 = time.perf_counter()
import sys
before = set(sys.modules)
import statewright
t1 = time.perf_counter()
from statewright import Engine, WorkflowBuilder, approve_and_run, start_task
t2 = time.perf_counter()
import sys
from statewright.store import open_store

sys.path.insert(0, sys.argv[2])  # bench/peers: the workload's workflow and steps
import workload

engine = Engine(open_store("sqlite:///" + sys.argv[1] + "/statewright.db"))
state = start_task(engine, workload.workflow(), {"n": 0})
t3 = time.perf_counter()
if state.status != "awaiting_approval":
    raise SystemExit(f"first task ended {state.status}, expected awaiting_approval")
ms = lambda a, b: round((b - a) * 1000, 2)
print(ms(t0, t1), ms(t1, t2), ms(t2, t3), ms(t0, t3))
print(",".join(m for m in sys.modules if m not in before and m.partition(".")[0] in sys.stdlib_module_names))
"""

# The standard modules alone: a fresh process imports, in the order the first task loaded
# them, the standard modules that process loaded (none of statewright's own work).
STDLIB = r"""
import time
t0 = time.perf_counter()
import importlib, sys
for name in sys.argv[1].split(","):
    importlib.import_module(name)
print(round((time.perf_counter() - t0) * 1000, 2))
"""

PEERS = Path(__file__).resolve().parent / "peers"
FIGURES = ("import_statewright_ms", "import_api_ms", "open_and_first_task_ms", "first_task_ms",
           "its_stdlib_modules_ms")


def one_process(env: dict[str, str]) -> list[float]:
    """The four figures of a first task, then the time a fresh process takes to import only
    the standard modules that first task loaded."""
    with tempfile.TemporaryDirectory() as directory:
        out = subprocess.run([sys.executable, "-c", CHILD, directory, str(PEERS)], check=True,
                             capture_output=True, text=True, env=env).stdout
    figures, modules = out.splitlines()
    floor = subprocess.run([sys.executable, "-c", STDLIB, modules], check=True, capture_output=True, text=True,
                           env=env).stdout
    return [float(x) for x in figures.split()] + [float(floor)]


def report(title: str, runs: list[list[float]]) -> None:
    print(f" {title}")
    for i, name in enumerate(FIGURES):
        values = [run[i] for run in runs]
        print(f"  {name:24} median {statistics.median(values):7.1f}"
              f"  (min {min(values):.1f}, max {max(values):.1f})")


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 9
    import statewright

    package = os.path.dirname(statewright.__file__)
    if any(os.path.isdir(os.path.join(root, "__pycache__")) for root, _, _ in os.walk(package)):
        print(f"note: {package} holds __pycache__ directories; the first block is not uncached")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M UTC}  {platform.machine()} {os.cpu_count()} cores"
          f"  load {load}  python {platform.python_version()}  {n} processes"
          f"  statewright from {package}")
    cold = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    cold["PYTHONDONTWRITEBYTECODE"] = "1"
    report("without bytecode cache", [one_process(cold) for _ in range(n)])
    with tempfile.TemporaryDirectory() as cache:
        warm = {k: v for k, v in cold.items() if k != "PYTHONDONTWRITEBYTECODE"}
        warm["PYTHONPYCACHEPREFIX"] = cache
        one_process(warm)  # writes the cache
        report("with bytecode cache", [one_process(warm) for _ in range(n)])
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f" load at the end {load}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
