"""The in-memory store: the Store protocol over plain dictionaries, for tests and for a
single-process ``statewright run --db memory:``. It keeps the promises the SQL stores keep
(one transaction per append that checks the expected version, event ids that make appends
idempotent, leases with fencing tokens, the hash chain, people changed only through their
log) and loses everything when the process ends.

``memory:`` opens a private database; ``memory:NAME`` the process's database of that name,
shared by every store opened on it (as connections share a file), so tests can race two
stores on one database. A transaction holds the database's lock and records how to undo
each write; a refusal undoes them all, so nothing of a refused append is left."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from statewright._canonical import canonical_json, compact_json
from statewright._crash import crash_point
from statewright._errors import StaleLeaseError, VersionConflictError
from statewright._record import record
from statewright.store.base import (
    CLAIMABLE_AT_ONCE,
    TASK_KIND,
    AppendRequest,
    AppendResult,
    Claim,
    EventRow,
    NewCommand,
    PollingWaits,
    StoredTask,
    TimerClaim,
    Wake,
)
from statewright.store.chain import GENESIS_HASH, Chain, RawEvent
from statewright.store.memory_fleet import MemoryFleet
from statewright.store.memory_people import MemoryPeople
from statewright.store.memory_tables import (
    CommandRow,
    RemoteEntry,
    TaskRow,
    TimerRow,
    Txn,
    database,
    database_exists,
    drop_database,
    name_of,
)
from statewright.store.remote import RemoteRow, heartbeat_timer, timeout_timer
from statewright.store.schema import SCHEMA_VERSION

__all__ = ["MemoryStore", "database_exists", "drop_database"]


class _Refused(Exception):
    """One append of a batch is refused: the whole batch is undone."""


class MemoryStore(PollingWaits, MemoryPeople, MemoryFleet):
    announces_work = False  # idle workers poll, as on SQLite

    def __init__(self, url: str = "memory:", *, chain: Chain | None = None, create: bool = True) -> None:
        self.url = url
        self.chain = chain if chain is not None else Chain()
        self.db = database(name_of(url), create)

    def close(self) -> None:
        """Nothing to release: a named database lives as long as the process."""

    def schema_version(self) -> int:
        return SCHEMA_VERSION

    def ensure_schema(self, *, upgrade: bool = True) -> int:
        return SCHEMA_VERSION

    # --- definitions -------------------------------------------------------------------
    def put_definition(self, content_hash: str, name: str, version: int, body: Mapping[str, Any]) -> None:
        with self.db.lock:
            self.db.definitions.setdefault(content_hash, (name, version, canonical_json(body)))

    def get_definition(self, content_hash: str) -> Mapping[str, Any] | None:
        row = self.db.definitions.get(content_hash)
        return json.loads(row[2]) if row is not None else None

    def definition_by_name(self, name: str) -> str | None:
        with self.db.lock:
            found = [(-v, h) for h, (n, v, _) in self.db.definitions.items() if n == name]
        return min(found)[1] if found else None

    # --- the one transaction -----------------------------------------------------------
    def append(
        self,
        task_id: str,
        expected_version: int,
        event: Mapping[str, Any],
        state: Mapping[str, Any],
        commands: Sequence[NewCommand],
        *,
        workflow: str = "",
        workflow_hash: str = "",
        idem_key: str | None = None,
        complete: tuple[str, int] | None = None,
        complete_timer: tuple[str, int] | None = None,
        terminal: bool = False,
        claim_for: tuple[str, int] | None = None,
        complete_remote: str | None = None,
        kind: str = TASK_KIND,
    ) -> AppendResult:
        req = AppendRequest(task_id, expected_version, event, state, commands, complete=complete,
                            complete_timer=complete_timer, terminal=terminal, claim_for=claim_for,
                            complete_remote=complete_remote, workflow=workflow, workflow_hash=workflow_hash,
                            idem_key=idem_key, kind=kind)
        req = self.encode(req)
        with self.db.txn() as txn:
            dup = self._duplicate(str(event["event_id"]))
            if dup is not None:
                return dup
            if expected_version == 0 and idem_key is not None and idem_key in self.db.idem_keys:
                return AppendResult(version=self.db.tasks[self.db.idem_keys[idem_key]].version, duplicate=True)
            return self._append_txn(txn, req)

    def encode(self, request: AppendRequest) -> AppendRequest:
        if isinstance(request.encoded, _Encoded):
            return request
        return replace(request, encoded=_Encoded(
            canonical_json(request.event), compact_json(request.state),
            tuple("" if c.timer else canonical_json(c.body) for c in request.commands),
        ))

    def append_batch(
        self, requests: Sequence[AppendRequest], *, wake: Wake | None = None
    ) -> list[AppendResult] | None:
        encoded = [self.encode(r) for r in requests]
        try:
            with self.db.txn() as txn:
                done = []
                for r in encoded:
                    if self._duplicate(str(r.event["event_id"])) is not None:
                        raise _Refused
                    done.append(self._append_txn(txn, r))
        except (VersionConflictError, StaleLeaseError, _Refused):
            return None
        if wake is not None:  # the appends are in: the ended claims' slots are free
            self.wake(wake.gates, wake.now_ms, wake.count)
        return done

    def _duplicate(self, event_id: str) -> AppendResult | None:
        found = self.db.event_ids.get(event_id)
        return AppendResult(version=found[1], duplicate=True) if found is not None else None

    def append_all(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        encoded = [self.encode(r) for r in requests]
        with self.db.txn() as txn:
            dup = self._duplicate(str(encoded[0].event["event_id"]))
            if dup is not None:
                return [dup]
            done = []
            for r in encoded:
                taken = r.idem_key is not None and r.idem_key in self.db.idem_keys  # as a unique index refuses
                if taken or self._duplicate(str(r.event["event_id"])) is not None:
                    raise VersionConflictError(r.task_id, r.expected_version, -1)
                done.append(self._append_txn(txn, r))
            return done

    def _append_txn(self, txn: Txn, req: AppendRequest) -> AppendResult:
        """The writes of one append; raises on a refusal (the caller's transaction undoes)."""
        db, enc = self.db, req.encoded
        task_id, event = req.task_id, req.event
        event_id, event_type, at_ms = str(event["event_id"]), str(event["type"]), int(event["at_ms"])
        version = req.expected_version + 1
        status = str(req.state.get("status", ""))
        row = db.tasks.get(task_id)
        if req.expected_version == 0:
            if row is not None:
                raise VersionConflictError(task_id, 0, row.version)
            prev = GENESIS_HASH
            h = self.chain.link(task_id, version, event_id, event_type, at_ms, prev, enc.body)
            txn.put(db.tasks, task_id, TaskRow(task_id, req.workflow, req.workflow_hash, status, version,
                                             enc.state_json, req.idem_key, h, at_ms, at_ms, req.parent_id, req.kind))
            if req.idem_key is not None:
                txn.put(db.idem_keys, req.idem_key, task_id)
        else:
            if row is None or row.version != req.expected_version:
                raise VersionConflictError(task_id, req.expected_version, row.version if row is not None else 0)
            prev = row.last_hash
            h = self.chain.link(task_id, version, event_id, event_type, at_ms, prev, enc.body)
            txn.put(db.tasks, task_id, replace(row, status=status, version=version, state=enc.state_json,
                                               last_hash=h, updated_at_ms=at_ms))
        txn.put(db.events, task_id, (*db.events.get(task_id, ()),
                                     RawEvent(task_id, version, event_id, event_type, enc.body, at_ms, prev, h)))
        txn.put(db.event_ids, event_id, (task_id, version))
        if req.complete is not None:
            command_id, token = req.complete
            held = db.outbox.get(command_id)
            if held is None or held.token != token:
                raise StaleLeaseError(command_id, token, held.token if held is not None else -1)
            txn.delete(db.outbox, command_id)
        if req.complete_timer is not None:
            timer = db.timers.get(req.complete_timer[0])
            if timer is None or timer.token != req.complete_timer[1]:
                raise StaleLeaseError(req.complete_timer[0], req.complete_timer[1], -1)
            txn.delete(db.timers, timer.timer_id)
        if req.complete_remote is not None:  # the attempt's row and its deadlines go with it
            txn.delete(db.remote, req.complete_remote)
            for tid in (timeout_timer(req.complete_remote), heartbeat_timer(req.complete_remote)):
                txn.delete(db.timers, tid)
        if req.terminal:  # what is left to do ends with the task; its notifications are still sent
            for cid in [c.command_id for c in db.outbox.values() if c.task_id == task_id and c.type != "Notify"]:
                txn.delete(db.outbox, cid)
            for tid in [t.timer_id for t in db.timers.values() if t.task_id == task_id]:
                txn.delete(db.timers, tid)
        claimed = None
        for c, body_json in zip(req.commands, enc.command_bodies, strict=True):
            if c.command_id in (db.timers if c.timer else db.outbox):
                raise VersionConflictError(task_id, req.expected_version, version)  # as a unique index refuses
            if c.timer:
                txn.put(db.timers, c.command_id, TimerRow(c.command_id, task_id, c.available_at_ms, c.purpose))
                continue
            row_c = self._new_row(task_id, c, body_json)
            if req.claim_for is not None and claimed is None and c.type in CLAIMABLE_AT_ONCE and c.chainable:
                worker_id, lease_expires_ms = req.claim_for
                row_c = replace(row_c, lease_owner=worker_id, lease_expires_ms=lease_expires_ms, token=1, deliveries=1)
                claimed = _claim(row_c)
            txn.put(db.outbox, c.command_id, row_c)
        crash_point("in_append_txn")
        return AppendResult(version=version, claimed=claimed)

    # --- reads -------------------------------------------------------------------------
    def load(self, task_id: str) -> StoredTask | None:
        row = self.db.tasks.get(task_id)
        return _stored(row) if row is not None else None

    def load_many(self, task_ids: Sequence[str]) -> dict[str, StoredTask]:
        with self.db.lock:
            rows = [self.db.tasks.get(t) for t in task_ids]
        return {r.task_id: _stored(r) for r in rows if r is not None}

    def task_by_key(self, idem_key: str) -> str | None:
        return self.db.idem_keys.get(idem_key)

    def children(self, parent_id: str) -> list[StoredTask]:
        with self.db.lock:
            rows = [r for r in self.db.tasks.values() if r.parent_id == parent_id]
        rows.sort(key=lambda r: (r.created_at_ms, r.task_id))
        return [_stored(r) for r in rows]

    def list_tasks(
        self, status: str | None = None, workflow: str | None = None, limit: int = 1000, *, kind: str = TASK_KIND
    ) -> list[StoredTask]:
        with self.db.lock:
            rows = [r for r in self.db.tasks.values() if r.kind == kind
                    and (not status or r.status == status) and (not workflow or r.workflow == workflow)]
        rows.sort(key=lambda r: (r.created_at_ms, r.task_id))
        return [_stored(r) for r in rows[:limit]]

    def task_ids(self) -> list[str]:
        with self.db.lock:
            return sorted(self.db.tasks)

    def events(self, task_id: str, after: int = 0) -> list[EventRow]:
        return [EventRow(r.task_id, r.version, r.event_id, r.type, json.loads(r.body), r.at_ms, r.prev_hash, r.hash)
                for r in self.db.events.get(task_id, ()) if r.version > after]

    def raw_events(self, task_id: str) -> list[RawEvent]:
        return list(self.db.events.get(task_id, ()))

    def raw_task(self, task_id: str) -> tuple[Any, ...] | None:
        r = self.db.tasks.get(task_id)
        if r is None:
            return None
        return (r.task_id, r.workflow, r.workflow_hash, r.status, r.version, r.state, r.created_at_ms,
                r.updated_at_ms, r.last_hash)

    def logged_task_ids(self) -> list[str]:
        with self.db.lock:
            return sorted(set(self.db.tasks) | set(self.db.events))

    def rechain(self, task_id: str, version: int, links: Sequence[tuple[str, str]]) -> bool:
        with self.db.txn() as txn:
            row = self.db.tasks.get(task_id)
            if row is None or row.version != version or len(links) != version:
                return False
            rows = self.db.events.get(task_id, ())
            if len(rows) != version:
                return False
            txn.put(self.db.events, task_id,
                    tuple(r._replace(prev_hash=prev, hash=h) for r, (prev, h) in zip(rows, links, strict=True)))
            txn.put(self.db.tasks, task_id, replace(row, last_hash=links[-1][1]))
        return True

    def replace_projection(self, task_id: str, version: int, state: Mapping[str, Any]) -> bool:
        with self.db.txn() as txn:
            row = self.db.tasks.get(task_id)
            if row is None or row.version != version:
                return False
            txn.put(self.db.tasks, task_id, replace(row, state=compact_json(state)))
        return True

    def has_event(self, event_id: str) -> bool:
        return event_id in self.db.event_ids

    def counts_by_status(self) -> dict[str, int]:
        out: dict[str, int] = {}
        with self.db.lock:
            for r in self.db.tasks.values():
                if r.kind == TASK_KIND:
                    out[r.status] = out.get(r.status, 0) + 1
        return out

    def outbox(self, task_id: str | None = None) -> list[dict[str, Any]]:
        with self.db.lock:
            rows = [c for c in self.db.outbox.values() if task_id is None or c.task_id == task_id]
        rows.sort(key=lambda c: c.available_at_ms)
        return [
            {"command_id": c.command_id, "task_id": c.task_id, "type": c.type, "token": c.token,
             "deliveries": c.deliveries, "failures": c.failures, "lease_expires_ms": c.lease_expires_ms,
             "available_at_ms": c.available_at_ms, "lease_owner": c.lease_owner, "priority": c.priority,
             "tenant": c.tenant, "waiting": c.waiting, "fair": c.fair}
            for c in rows
        ]

    def timers(self, task_id: str | None = None) -> list[dict[str, Any]]:
        with self.db.lock:
            rows = [t for t in self.db.timers.values() if task_id is None or t.task_id == task_id]
        rows.sort(key=lambda t: t.due_at_ms)
        return [{"timer_id": t.timer_id, "task_id": t.task_id, "due_at_ms": t.due_at_ms, "purpose": t.purpose}
                for t in rows]

    # --- leases ------------------------------------------------------------------------
    def renew(self, command_id: str, token: int, now_ms: int, lease_ms: int) -> bool:
        with self.db.lock:
            c = self.db.outbox.get(command_id)
            if c is None or c.token != token or c.lease_expires_ms is None:
                return False  # a lease given back is not taken again by renewing it
            self.db.outbox[command_id] = replace(c, lease_expires_ms=now_ms + lease_ms)
            return True

    def release(
        self, command_id: str, token: int, available_at_ms: int, *, failed: bool, error: str = "",
        started: bool = True,
    ) -> None:
        with self.db.lock:
            c = self.db.outbox.get(command_id)
            if c is None or c.token != token:
                return
            deliveries = c.deliveries - (0 if started else 1) if c.deliveries > 0 else 0
            self.db.outbox[command_id] = replace(
                c, lease_owner=None, lease_expires_ms=None, available_at_ms=available_at_ms,
                failures=c.failures + (1 if failed else 0), last_error=error[:2000], deliveries=deliveries,
            )

    def ack(self, command_id: str, token: int, *, wake: Wake | None = None) -> None:
        with self.db.lock:
            c = self.db.outbox.get(command_id)
            if c is not None and c.token == token:
                del self.db.outbox[command_id]
            if wake is not None:
                self.wake(wake.gates, wake.now_ms, wake.count)

    def claim_timers(
        self, worker_id: str, now_ms: int, lease_ms: int, limit: int = 10, *, task_id: str | None = None
    ) -> list[TimerClaim]:
        with self.db.lock:
            due = sorted(
                (t for t in self.db.timers.values()
                 if t.due_at_ms <= now_ms and (t.lease_expires_ms is None or t.lease_expires_ms <= now_ms)
                 and (task_id is None or t.task_id == task_id)),
                key=lambda t: t.due_at_ms,
            )[:limit]
            out = []
            for t in due:
                held = replace(t, lease_owner=worker_id, lease_expires_ms=now_ms + lease_ms, token=t.token + 1)
                self.db.timers[t.timer_id] = held
                out.append(TimerClaim(held.timer_id, held.task_id, held.due_at_ms, held.purpose, held.token))
        return out

    def drop_timer(self, timer_id: str, token: int) -> None:
        with self.db.lock:
            t = self.db.timers.get(timer_id)
            if t is not None and t.token == token:
                del self.db.timers[timer_id]

    def next_due_ms(self, *, task_id: str | None = None) -> int | None:
        with self.db.lock:
            due = [c.available_at_ms if c.lease_expires_ms is None else c.lease_expires_ms
                   for c in self.db.outbox.values() if task_id is None or c.task_id == task_id]
            due += [t.due_at_ms if t.lease_expires_ms is None else t.lease_expires_ms
                    for t in self.db.timers.values() if task_id is None or t.task_id == task_id]
        return min(due) if due else None

    # --- remote attempts (store/remote.py says what each does) ----------------------------
    def park_remote(
        self, command_id: str, token: int, task_id: str, queue: str, body: Mapping[str, Any], now_ms: int,
        timeout_due_ms: int | None, heartbeat_ms: int,
    ) -> None:
        with self.db.txn() as txn:
            held = self.db.outbox.get(command_id)
            if held is None or held.token != token:
                raise StaleLeaseError(command_id, token, -1)
            txn.delete(self.db.outbox, command_id)
            row = RemoteRow(command_id, task_id, queue, json.loads(canonical_json(dict(body))), now_ms, heartbeat_ms,
                            None, None)
            txn.put(self.db.remote, command_id, RemoteEntry(row))
            if timeout_due_ms is not None:
                timer = timeout_timer(command_id)
                txn.put(self.db.timers, timer, TimerRow(timer, task_id, timeout_due_ms, "remote_timeout"))

    def claim_remote(self, queue: str, agent: str, token_hash: str, now_ms: int) -> RemoteRow | None:
        with self.db.txn() as txn:
            waiting = sorted((e.row for e in self.db.remote.values() if e.row.queue == queue and e.row.agent is None),
                             key=lambda r: (r.parked_at_ms, r.command_id))
            if not waiting:
                return None
            row = replace(waiting[0], agent=agent, claimed_at_ms=now_ms)
            txn.put(self.db.remote, row.command_id, RemoteEntry(row, token_hash))
            timer = heartbeat_timer(row.command_id)
            txn.put(self.db.timers, timer, TimerRow(timer, row.task_id, now_ms + row.heartbeat_ms, "remote_heartbeat"))
            return row

    def remote_by_token(self, token_hash: str) -> RemoteRow | None:
        with self.db.lock:
            return next((e.row for e in self.db.remote.values() if e.token_hash == token_hash), None)

    def heartbeat_remote(self, token_hash: str, now_ms: int) -> RemoteRow | None:
        with self.db.lock:
            row = next((e.row for e in self.db.remote.values() if e.token_hash == token_hash), None)
            if row is None:
                return None
            timer = self.db.timers.get(heartbeat_timer(row.command_id))
            if timer is None or timer.due_at_ms <= now_ms:
                return None
            self.db.timers[timer.timer_id] = replace(timer, due_at_ms=now_ms + row.heartbeat_ms, token=timer.token + 1,
                                                     lease_owner=None, lease_expires_ms=None)
            return row

    def remote_row(self, command_id: str) -> RemoteRow | None:
        with self.db.lock:
            entry = self.db.remote.get(command_id)
        return entry.row if entry is not None else None

    def remote_rows(self, queue: str | None = None) -> list[RemoteRow]:
        with self.db.lock:
            rows = [e.row for e in self.db.remote.values() if queue is None or e.row.queue == queue]
        return sorted(rows, key=lambda r: (r.parked_at_ms, r.command_id))


@record
class _Encoded:
    """The JSON text of one append, made before its transaction opens."""

    body: str  # the event, canonical (it is hashed)
    state_json: str
    command_bodies: tuple[str, ...]  # canonical; "" for a timer


def _claim(c: CommandRow) -> Claim:
    return Claim(
        command_id=c.command_id, task_id=c.task_id, type=c.type, body=json.loads(c.body), token=c.token,
        deliveries=c.deliveries, failures=c.failures, lease_expires_ms=int(c.lease_expires_ms or 0),
    )


def _stored(r: TaskRow) -> StoredTask:
    return StoredTask(
        task_id=r.task_id, workflow=r.workflow, workflow_hash=r.workflow_hash, status=r.status,
        version=r.version, state=json.loads(r.state), created_at_ms=r.created_at_ms, updated_at_ms=r.updated_at_ms,
        kind=r.kind,
    )
