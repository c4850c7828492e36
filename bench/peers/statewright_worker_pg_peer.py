"""statewright_worker_peer's workload on PostgreSQL: a long-running ``Worker`` in a thread, in
a new schema of the server at STATEWRIGHT_BENCH_PG_URL (default
postgresql://postgres@127.0.0.1:5432/test), dropped at exit. Not in run.py's table: the SQL
tally counts SQLite statements only, so its counts here are zero.

    PYTHONPATH=../../src python statewright_worker_pg_peer.py $(mktemp -d) 30
"""

from __future__ import annotations

import atexit
import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

from _common import main
from statewright_peer import build
from statewright_worker_peer import handing_to

SERVER = os.environ.get("STATEWRIGHT_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def setup(directory: Path) -> Callable[[int], None]:
    import psycopg

    from statewright import Worker

    schema = f"peer_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in SERVER else "?"
    engine, workflow, alice = build(directory, f"{SERVER}{sep}schema={schema}")
    worker = Worker(engine)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()

    def drop() -> None:
        worker.stopping.set()
        thread.join(timeout=30)
        engine.close()
        with psycopg.connect(SERVER, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    atexit.register(drop)

    return handing_to(worker, engine, workflow, alice)


if __name__ == "__main__":
    main(setup)
