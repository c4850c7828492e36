"""The embedded default: one SQLite file (stdlib sqlite3), WAL, synchronous=FULL."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from statewright._errors import NotAStatewrightDatabaseError, StoreError
from statewright.store.sql import SqlStore

SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


class SQLiteStore(SqlStore):
    def __init__(self, path: str | Path, *, synchronous: str = "FULL", create: bool = True) -> None:
        sync = synchronous.upper()
        if sync not in SYNCHRONOUS_MODES:
            msg = f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}, got {synchronous!r}"
            raise StoreError(msg)
        self.path = Path(path)
        self.url = str(self.path)
        if not create and not self.path.exists():
            msg = f"{self.path}: no statewright database here; submit a task first or pass --db"
            raise NotAStatewrightDatabaseError(msg)
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        try:
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30.0
            )
        except sqlite3.DatabaseError as exc:
            msg = f"{self.path}: not a statewright database ({exc})"
            raise NotAStatewrightDatabaseError(msg) from None
        self._depth = 0
        try:
            self._conn.execute("PRAGMA busy_timeout = 30000")
            # Check the schema first: WAL mode is written into the file, and a file that is
            # not a statewright database must be left exactly as it was.
            self.ensure_schema()
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute(f"PRAGMA synchronous = {sync}")
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            msg = f"{self.path}: not a statewright database ({exc})"
            raise NotAStatewrightDatabaseError(msg) from None
        except BaseException:
            self._conn.close()
            raise

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self._conn.cursor()
                finally:
                    self._depth -= 1
                return
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            self._depth = 1
            try:
                yield cur
            except BaseException:
                self._depth = 0
                cur.execute("ROLLBACK")
                raise
            else:
                self._depth = 0
                cur.execute("COMMIT")

    def _is_unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc).upper()

    def _tables(self, cur: Any) -> set[str]:
        rows = cur.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return {str(r[0]) for r in rows if not str(r[0]).startswith("sqlite_")}
