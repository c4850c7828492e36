"""Storage backends behind one Store protocol; ``open_store(url)`` picks one."""

from __future__ import annotations

import os
from pathlib import Path
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

DEFAULT_DB = ".statewright/state.db"
MEMORY_PREFIX = "memory:"

__all__ = [
    "DEFAULT_DB",
    "MEMORY_PREFIX",
    "AppendRequest",
    "AppendResult",
    "Claim",
    "EventRow",
    "NewCommand",
    "Store",
    "StoredTask",
    "TimerClaim",
    "default_db",
    "is_memory_url",
    "open_store",
]


def default_db() -> str:
    return os.environ.get("STATEWRIGHT_DB") or DEFAULT_DB


def is_memory_url(url: str | Path | None) -> bool:
    """True for a URL of the in-memory store (``memory:`` or ``memory:NAME``)."""
    return isinstance(url, str) and url.startswith(MEMORY_PREFIX)


def open_store(url: str | Path | None = None, *, create: bool = True, chain: Chain | None = None) -> Store:
    """``postgresql://...`` opens PostgreSQL (the ``[postgres]`` extra); ``memory:`` a new
    in-memory store, ``memory:NAME`` the process's in-memory database of that name (both
    gone when the process ends); anything else is a SQLite path, optionally
    ``sqlite:///path?synchronous=NORMAL``. Event rows are linked by ``chain``, by default
    keyed when STATEWRIGHT_CHAIN_KEY is set (see store/chain.py)."""
    target = str(url) if url is not None else default_db()
    chain = chain if chain is not None else chain_from_env()
    if is_memory_url(target):
        from statewright.store.memory import MemoryStore

        return MemoryStore(target, chain=chain, create=create)
    if target.startswith(("postgresql://", "postgres://")):
        from statewright.store.postgres import PostgresStore

        pg = PostgresStore(target)
        pg.chain = chain
        return pg
    synchronous = "FULL"
    if target.startswith("sqlite:"):
        parts = urlsplit(target)
        target = parts.path if not parts.netloc else parts.netloc + parts.path
        q = parse_qs(parts.query)
        synchronous = q.get("synchronous", ["FULL"])[0]
    from statewright.store.sqlite import SQLiteStore

    lite = SQLiteStore(target, synchronous=synchronous, create=create)
    lite.chain = chain
    return lite
