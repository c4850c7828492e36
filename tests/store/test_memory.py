"""What only the in-memory store has: ``memory:`` is private to the store that opened it,
``memory:NAME`` is shared by every store of this process opened on that name, and a store
opened without ``create`` refuses a name this process does not hold. The rest of its
promises are the conformance suite's (``test_conformance.py`` runs on it)."""

from __future__ import annotations

import uuid

import pytest

from statewright._errors import NotAStatewrightDatabaseError, VersionConflictError
from statewright.store import NewCommand, Store, is_memory_url, open_store
from statewright.store.memory import database_exists, drop_database


def submit(store: Store, task_id: str, event_id: str = "") -> None:
    store.append(task_id, 0, {"event_id": event_id or f"{task_id}:submitted", "type": "Noted", "at_ms": 1},
                 {"status": "running"}, [], workflow="wf", workflow_hash="h" * 64)


def test_memory_alone_is_private_to_its_store() -> None:
    """Two stores opened on ``memory:`` see nothing of each other's tasks."""
    a, b = open_store("memory:"), open_store("memory:")
    submit(a, "t1")
    assert a.task_ids() == ["t1"] and b.task_ids() == []


def test_a_named_memory_database_is_shared_in_the_process_until_dropped() -> None:
    """Stores opened on one ``memory:NAME`` share its tables, as connections share a file;
    once dropped, the name opens a fresh database."""
    url = f"memory:{uuid.uuid4().hex}"
    first = open_store(url)
    submit(first, "t1")
    first.close()
    assert database_exists(url) and open_store(url).task_ids() == ["t1"]
    with pytest.raises(VersionConflictError):
        submit(open_store(url), "t1", "another")  # another store, the same row: the version check holds
    drop_database(url)
    assert not database_exists(url) and open_store(url).task_ids() == []
    drop_database(url)


def test_without_create_an_unknown_name_is_refused_in_one_line() -> None:
    """``open_store(url, create=False)`` on a name this process does not hold makes nothing."""
    url = f"memory:{uuid.uuid4().hex}"
    with pytest.raises(NotAStatewrightDatabaseError) as raised:
        open_store(url, create=False)
    assert str(raised.value) == f"{url}: no in-memory database of that name in this process"
    assert "\n" not in str(raised.value) and not database_exists(url)
    assert is_memory_url(url) and not is_memory_url("memory.db")


def test_a_refused_append_undoes_every_write_it_made() -> None:
    """An append refused after some of its writes (a command id already in the outbox) leaves
    the task, its log and the outbox exactly as they were."""
    store = open_store("memory:")
    cmd = NewCommand("c1", "RunStep", {"step": "a"}, 1)
    store.append("t1", 0, {"event_id": "t1:submitted", "type": "Noted", "at_ms": 1}, {"status": "running"}, [cmd])
    before = (store.raw_task("t1"), store.raw_events("t1"), store.outbox())
    with pytest.raises(VersionConflictError):
        store.append("t1", 1, {"event_id": "e2", "type": "Noted", "at_ms": 2}, {"status": "running"}, [cmd])
    assert (store.raw_task("t1"), store.raw_events("t1"), store.outbox()) == before
    assert not store.has_event("e2")
