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
from statewright.store.chain import Chain, chain_from_env

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


def open_store(url: str | Path | None = None, *, create: bool = True, chain: Chain | None = None) -> SqlStore:
    """``postgresql://...`` opens PostgreSQL (the ``[postgres]`` extra); anything else is a
    SQLite path, optionally ``sqlite:///path?synchronous=NORMAL``. Event rows are linked by
    ``chain``, by default keyed when STATEWRIGHT_CHAIN_KEY is set (see store/chain.py)."""
    target = str(url) if url is not None else default_db()
    chain = chain if chain is not None else chain_from_env()
    store: SqlStore
    if target.startswith(("postgresql://", "postgres://")):
        from statewright.store.postgres import PostgresStore

        store = PostgresStore(target)
        store.chain = chain
        return store
    synchronous = "FULL"
    if target.startswith("sqlite:"):
        parts = urlsplit(target)
        target = parts.path if not parts.netloc else parts.netloc + parts.path
        q = parse_qs(parts.query)
        synchronous = q.get("synchronous", ["FULL"])[0]
    from statewright.store.sqlite import SQLiteStore

    store = SQLiteStore(target, synchronous=synchronous, create=create)
    store.chain = chain
    return store
