"""A worker process for the benchmark. It reports JSON lines on stdout.

    bench_child.py drain URL   # report ready, wait for "go" on stdin, drain all due work, report
    bench_child.py idle URL    # report ready, then work (and idle-poll) until SIGTERM

Only statewright and the stdlib are imported, so the peak RSS it reports is the worker's."""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path


def vm_hwm_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return -1


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def report(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    mode, url = argv[0], argv[1]
    from statewright import Engine, Worker
    from statewright.store import open_store

    engine = Engine(open_store(url))
    worker = Worker(engine)
    if mode == "idle":  # ready means idle: what Worker.run imports first (its executors) is loaded
        import statewright.executors.agents
        import statewright.executors.checks
        import statewright.executors.code  # noqa: F401
    report(mode=mode, vm_hwm_kb=vm_hwm_kb())
    if mode == "drain":
        sys.stdin.readline()
        t_start, cpu_start = time.time(), cpu_seconds()
        stats = worker.run(until_idle=True)
        t_end, cpu_end = time.time(), cpu_seconds()
        report(t_start=t_start, t_end=t_end, commands=stats.commands, vm_hwm_kb=vm_hwm_kb(),
               cpu_seconds=cpu_end - cpu_start)
    elif mode == "idle":
        worker.install_signal_handlers()
        worker.run()
    else:
        raise SystemExit(f"unknown mode {mode!r}; use drain or idle")
    engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
