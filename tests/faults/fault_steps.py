"""The code step of the fault tests: an external effect keyed by the idempotency key.

The effect is a row in ``effects`` (outside statewright's tables) under a unique key,
inserted ON CONFLICT DO NOTHING, so a redelivered command re-runs the step without doing
the effect twice; ``attempts`` counts how often the step ran for that key."""

from __future__ import annotations

import os
from typing import Any

_conn: Any = None


def _connection() -> Any:
    global _conn
    if _conn is None:
        import psycopg

        _conn = psycopg.connect(os.environ["FAULTS_PG_CONNINFO"], autocommit=True)
        _conn.execute(f'SET search_path TO "{os.environ["FAULTS_PG_SCHEMA"]}"')
        # The effects table is the test's stand-in for another system, not statewright's
        # data: skip its fsync wait so the test measures the workers, not the disk.
        _conn.execute("SET synchronous_commit TO off")
    return _conn


def record(ctx: Any) -> bool:
    """Do the effect once per key (ON CONFLICT DO NOTHING); count every attempt."""
    _connection().execute(
        "WITH done AS (INSERT INTO effects (key, task_id, step, first_pid, attempts)"
        " VALUES (%(key)s, %(task)s, %(step)s, %(pid)s, 1) ON CONFLICT (key) DO NOTHING RETURNING key)"
        " UPDATE effects SET attempts = attempts + 1 WHERE key = %(key)s"
        " AND NOT EXISTS (SELECT 1 FROM done)",
        {"key": ctx.idempotency_key, "task": ctx.task_id, "step": ctx.step, "pid": os.getpid()},
    )
    return True


def record_after_work(ctx: Any) -> bool:
    """``record``, after some work (a quarter second): a kill finds steps in flight."""
    import time

    time.sleep(0.25)
    return record(ctx)


def create_effects(conninfo: str, schema: str) -> None:
    """The effects table ``record`` writes to, in ``schema`` (the test's stand-in for another
    system: one row per idempotency key)."""
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute("CREATE TABLE effects (key TEXT PRIMARY KEY, task_id TEXT NOT NULL, step TEXT NOT NULL,"
                     " first_pid INTEGER NOT NULL, attempts INTEGER NOT NULL DEFAULT 0)")
