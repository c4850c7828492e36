"""The backends the store tests run on: an in-memory database, a SQLite file, or a fresh
PostgreSQL schema.

PostgreSQL comes from ``STATEWRIGHT_TEST_PG_URL`` (default: user ``postgres``, then ``root``,
at 127.0.0.1:5432/test). When no server answers, PostgreSQL tests are skipped with one
reason line, or fail when ``STATEWRIGHT_REQUIRE_POSTGRES=1``."""

from __future__ import annotations

import functools
import os
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

# Every backend the store offers, the ``backend`` fixture's parameters. A test of what only a
# SQL database has (its schema, rows edited behind the store's back) runs on SQL_BACKENDS:
# @pytest.mark.parametrize("backend", SQL_BACKENDS).
SQL_BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
BACKENDS = ["memory", *SQL_BACKENDS]
DEFAULT_PG_URLS = (
    "postgresql://postgres@127.0.0.1:5432/test",
    "postgresql://root@127.0.0.1:5432/test",
)


@functools.cache
def _probe() -> tuple[str | None, str]:
    """(a reachable server URL, "") or (None, why not). Probed once per test session."""
    env = os.environ.get("STATEWRIGHT_TEST_PG_URL")
    candidates = (env,) if env else DEFAULT_PG_URLS
    shown = candidates[0]
    try:
        import psycopg
    except ImportError:
        return None, f"PostgreSQL not reachable at {shown} (psycopg is not installed); " \
            "install statewright[postgres] and set STATEWRIGHT_TEST_PG_URL"
    last = ""
    for url in candidates:
        try:
            conn = psycopg.connect(url, connect_timeout=3)
        except psycopg.Error as exc:
            last = " ".join(str(exc).split())[:160]
            continue
        conn.close()
        return url, ""
    return None, f"PostgreSQL not reachable at {shown} ({last}); set STATEWRIGHT_TEST_PG_URL"


def _required() -> bool:
    return os.environ.get("STATEWRIGHT_REQUIRE_POSTGRES") == "1"


def skip_unreachable_postgres(items: Sequence[pytest.Item], under: Path) -> None:
    """Mark the ``postgres`` tests under ``under`` as skipped when no server answers, so the
    summary folds them into one reason line per file (unless STATEWRIGHT_REQUIRE_POSTGRES=1,
    when the fixture fails them instead)."""
    mine = [i for i in items if i.get_closest_marker("postgres") and under in i.path.parents]
    if not mine or _required():
        return
    url, reason = _probe()
    if url is None:
        for item in mine:
            item.add_marker(pytest.mark.skip(reason=reason))


def pg_server() -> str:
    """The server URL, or skip (fail under STATEWRIGHT_REQUIRE_POSTGRES=1)."""
    url, reason = _probe()
    if url is None:
        if _required():
            pytest.fail(f"{reason} [STATEWRIGHT_REQUIRE_POSTGRES=1]", pytrace=False)
        pytest.skip(reason)
    return url


def with_schema(url: str, schema: str) -> str:
    parts = urlsplit(url)
    query = f"{parts.query}&schema={schema}" if parts.query else f"schema={schema}"
    return urlunsplit(parts._replace(query=query))


@contextmanager
def fresh_pg_schema(prefix: str = "swt") -> Iterator[tuple[str, str]]:
    """(store URL naming a new schema, the schema's name); the schema is dropped after."""
    import psycopg

    server = pg_server()
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        yield with_schema(server, name), name
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def raw_sql(url: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run one statement behind the store's back (``?`` placeholders) and commit it."""
    if url.startswith("postgresql://"):
        import psycopg

        from statewright.store.postgres import split_url

        conninfo, schema = split_url(url)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            if schema:
                conn.execute(f'SET search_path TO "{schema}"')
            cur = conn.execute(sql.replace("?", "%s"), tuple(params))  # type: ignore[arg-type]
            return list(cur.fetchall()) if cur.description else []
    conn3 = sqlite3.connect(url)
    try:
        cur3 = conn3.execute(sql, tuple(params))
        rows = cur3.fetchall()
        conn3.commit()
        return rows
    finally:
        conn3.close()
