"""One worker process for the fault tests (the runtime has no worker entry point yet).

    python pg_worker.py URL WORKSPACE_ROOT IDLE_SECONDS

Builds ``Engine(open_store(URL))`` and runs ``Worker(engine, lease_seconds=2)`` (with the
loop's handlers: it wakes loop runs, and takes up one whose driver died) until it
has done nothing for IDLE_SECONDS, or SIGTERM. Idle waits go through the store's
``wait_for_work`` (LISTEN/NOTIFY on PostgreSQL) by way of the clock the engine is given:
that is the worker change this backend asks for, made here without editing the runtime."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from statewright import Engine, Worker
from statewright.loop.wake import handlers
from statewright.runtime.clock import SystemClock
from statewright.store import open_store
from statewright.store.sql import SqlStore


class ListeningClock(SystemClock):
    """Wall time, but an idle worker's sleep ends as soon as the store announces work."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    def sleep(self, seconds: float, wake: threading.Event | None = None) -> None:
        self.store.wait_for_work(seconds, wake)


def main(argv: list[str]) -> int:
    url, workspace_root, idle_seconds = argv[0], Path(argv[1]), float(argv[2])
    store = open_store(url)
    engine = Engine(store, clock=ListeningClock(store), workspace_root=workspace_root)
    worker = Worker(engine, lease_seconds=2, idle_poll_seconds=0.5, handlers=handlers(store, lease_seconds=2))
    worker.install_signal_handlers()
    last = [time.monotonic(), 0.0]

    def idle_too_long() -> bool:
        done = worker.stats.commands + worker.stats.timers
        if done != last[1]:
            last[:] = [time.monotonic(), done]
        return time.monotonic() - last[0] > idle_seconds

    try:
        stats = worker.run(until=idle_too_long)
    finally:
        engine.close()
    print(f"commands={stats.commands} stale={stats.stale}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
