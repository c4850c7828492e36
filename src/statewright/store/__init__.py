"""Storage backends behind one Store protocol; ``open_store(url)`` picks one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from statewright.store.base import (
    AppendRequest,
    AppendResult,
    Claim,
    EventRow,
    NewCommand,
    Store,
    StoredTask,
    TimerClaim,
)

if TYPE_CHECKING:
    from statewright.store.sql import SqlStore

DEFAULT_DB = ".statewright/state.db"

__all__ = [
    "DEFAULT_DB",
    "AppendRequest",
    "AppendResult",
    "Claim",
    "EventRow",
    "NewCommand",
    "Store",
    "StoredTask",
    "TimerClaim",
    "default_db",
    "open_store",
]


def default_db() -> str:
    return os.environ.get("STATEWRIGHT_DB") or DEFAULT_DB


def open_store(url: str | Path | None = None, *, create: bool = True) -> SqlStore:
    """``postgresql://...`` opens PostgreSQL (the ``[postgres]`` extra); anything else is a
    SQLite path, optionally ``sqlite:///path?synchronous=NORMAL``."""
    target = str(url) if url is not None else default_db()
    if target.startswith(("postgresql://", "postgres://")):
        from statewright.store.postgres import PostgresStore

        store: SqlStore = PostgresStore(target)
        return store
    synchronous = "FULL"
    if target.startswith("sqlite:"):
        parts = urlsplit(target)
        target = parts.path if not parts.netloc else parts.netloc + parts.path
        q = parse_qs(parts.query)
        synchronous = q.get("synchronous", ["FULL"])[0]
    from statewright.store.sqlite import SQLiteStore

    return SQLiteStore(target, synchronous=synchronous, create=create)
