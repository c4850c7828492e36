"""Loop runs as streams of kind ``loop_run`` in the store's own tables, on every backend.

    sw_tasks   one row per run (kind ``loop_run``, ``workflow`` = the loop's name): its status,
               version and projection {status, loop, state, meta, lines}
    sw_events  the run's log, hash-chained like a task's: version 1 is ``RunOpened`` (the state
               it opened with and the loop file it is pinned to); every later event is one line
               of the record, its body holding the event, the line and the commands it asked for,
               and what the line wrote down (an ``ItemsFound``'s item payloads, a
               ``RecordAppended``'s pass record)

A run's id is its number (``1``); its stream is ``loop-run-1``. Every line is ONE append of the
store (event, projection, in one transaction, checking the expected version: a stale writer
loses cleanly). What earlier releases kept in ``loop_*`` tables of a SQLite file is carried
over by ``loop._carry`` the first time the file is opened.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from statewright._errors import InputError, VersionConflictError
from statewright._record import record
from statewright.loop.errors import RunHeldError
from statewright.machine.loop.codec import (
    command_to_dict,
    event_to_dict,
    line_body,
    line_from_dict,
    recased,
    run_projection,
    state_from_dict,
    state_to_dict,
)
from statewright.machine.loop.events import (
    AppendRecord,
    Command,
    DriveRun,
    Event,
    ItemsFound,
    RecordAppended,
    RunOpened,
)
from statewright.machine.loop.model import LEGACY_VERDICTS, ItemLedger, LineKind, LoopState, LoopStatus, RecordLine
from statewright.machine.seam import RUN_STREAM_PREFIX, StreamKind
from statewright.runtime.children import wake_rows
from statewright.store.base import Claim, EventRow, NewCommand, Store, StoredTask

RUN_PREFIX = RUN_STREAM_PREFIX
LOOP_RUN = str(StreamKind.LOOP_RUN)
_ALL_RUNS = 1_000_000


@record
class RunRow:
    """A run as stored: its newest state and its bookkeeping."""

    run_id: str
    loop: str
    status: LoopStatus
    state: LoopState
    lines: int
    version: int
    definition_path: str
    definition_sha256: str
    opened_at_ms: int
    updated_at_ms: int
    assets: Mapping[str, str]
    owner_pid: int | None
    definition_file: str = ""  # the loop file's absolute path (a worker that wakes the run reads it)

    @property
    def held(self) -> bool:
        """A STUCK run that nobody has cleared holds every new run of its loop."""
        return self.state.held

    @property
    def cleared_by(self) -> str | None:
        return self.state.cleared_by or None

    @property
    def cleared_reason(self) -> str | None:
        return self.state.cleared_reason or None


@record
class StoredLine:
    seq: int
    state: LoopStatus
    next_state: LoopStatus
    kind: LineKind
    event_type: str
    event: str
    summary: str
    written: Mapping[str, Any]
    commands: Sequence[Mapping[str, Any]]
    at_ms: int


@record
class ApprovalRow:
    """A gate waiting for a person: the run's pass in AWAITING_HUMAN."""

    run_id: str
    proposal_hash: str
    item_id: str
    attempt: int
    role: str
    shown: Mapping[str, Any]
    requested_at_ms: int
    timeout_at_ms: int | None


def stream_id(run_id: str) -> str:
    return f"{RUN_PREFIX}{run_number(run_id)}"


def run_number(run_id: str) -> int:
    text = str(run_id).strip()
    if not text.isdigit() or len(text) > 18:
        msg = f"a run id is a number, got {run_id!r}; list runs with 'statewright loop status'"
        raise InputError(msg)
    return int(text)


def new_event_id() -> str:
    return uuid.uuid4().hex


class LoopStore:
    """Loop runs in a statewright store. Use as a context manager, or call close()."""

    def __init__(self, store: Store, *, owns: bool = True) -> None:
        self.store = store
        self._owns = owns  # False: the store is another's (the server's engine), never closed here
        self.url = str(store.url)
        path = getattr(store, "path", None)
        self.path: str | None = str(path) if isinstance(path, Path | str) else None
        self.drive: Claim | None = None  # the lease of the process driving a run through this store

    @classmethod
    def open(cls, db: str | Path, *, create: bool = True) -> LoopStore:
        """The store at ``db`` (a SQLite path, ``sqlite:///...``, ``postgresql://...`` or
        ``memory:NAME``); loop tables an earlier release left in a SQLite file are carried over."""
        from statewright.loop._carry import carry_loop_tables
        from statewright.store import open_store

        store = open_store(db, create=create)
        try:
            carry_loop_tables(store)
        except BaseException:
            store.close()
            raise
        return cls(store)

    def close(self) -> None:
        if self._owns:
            self.store.close()

    def __enter__(self) -> LoopStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- runs

    def create_run(
        self,
        *,
        loop: str,
        definition_path: str,
        definition_sha256: str,
        make_state: Callable[[str, tuple[ItemLedger, ...]], LoopState],
        assets: Mapping[str, str],
        at_ms: int,
        owner_pid: int | None = None,
    ) -> RunRow:
        """Open a new IDLE run that carries the loop's item ledger. Refuses while held."""
        for _ in range(20):  # another process may take the same number first: then the next
            newest = self.latest_run(loop)
            if newest is not None and newest.held:
                msg = (
                    f"loop {loop!r}: run {newest.run_id} ended stuck ({newest.state.reason})"
                    f" and holds new runs; clear it with 'statewright loop clear"
                    f" {newest.run_id} --reason TEXT' with an operator's token"
                )
                raise RunHeldError(msg, run_id=newest.run_id, loop=loop)
            number = 1 + max((run_number(r.task_id[len(RUN_PREFIX):]) for r in self._streams()), default=0)
            run_id = str(number)
            state = make_state(run_id, newest.state.items if newest is not None else ())
            opened = RunOpened(state_to_dict(state), definition_path, definition_sha256, dict(assets), at_ms,
                               event_id=new_event_id())
            meta = {"definition_path": definition_path, "definition_sha256": definition_sha256,
                    "definition_file": str(Path(definition_path).resolve()) if definition_path else "",
                    "assets": dict(assets), "opened_at_ms": at_ms, "owner_pid": owner_pid}
            try:
                self.store.append(stream_id(run_id), 0, event_to_dict(opened), run_projection(state, meta, 0), (),
                                  workflow=loop, workflow_hash=definition_sha256, kind=LOOP_RUN)
            except VersionConflictError:
                continue
            return self.run(run_id)
        raise InputError(f"loop {loop!r}: could not take a run number; try again")

    def run(self, run_id: str) -> RunRow:
        row = self.store.load(stream_id(run_id))
        if row is None or row.kind != LOOP_RUN:
            msg = f"no loop run with id {run_id!r}; list runs with 'statewright loop status'"
            raise InputError(msg)
        return _run_row(row)

    def latest_run(self, loop: str) -> RunRow | None:
        rows = self._streams(loop)
        if not rows:
            return None
        return _run_row(max(rows, key=lambda r: run_number(r.task_id[len(RUN_PREFIX):])))

    def runs(self, *, loop: str | None = None, limit: int = 20) -> list[RunRow]:
        rows = sorted(self._streams(loop), key=lambda r: run_number(r.task_id[len(RUN_PREFIX):]), reverse=True)
        return [_run_row(r) for r in rows[:limit]]

    def _streams(self, loop: str | None = None) -> list[StoredTask]:
        return [r for r in self.store.list_tasks(workflow=loop, limit=_ALL_RUNS, kind=LOOP_RUN)
                if r.task_id.startswith(RUN_PREFIX)]

    # ---------------------------------------------------------------- the record

    def append(
        self,
        run_id: str,
        *,
        expected_lines: int,
        line: RecordLine,
        state: LoopState,
        event: Event,
        commands: Sequence[Command],
        extra: Mapping[str, Any] | None = None,
        owner_pid: int | None = None,
        drive_for: tuple[str, int] | None = None,
    ) -> int:
        """Append one line (the event, what it wrote, the new state) in ONE transaction of the
        store, at the run's version ``expected_lines + 1``; return its seq. ``extra`` is kept
        in the event's body (an ``ItemsFound``'s payloads, a ``RecordAppended``'s record).
        ``drive_for`` (worker id, lease expiry): the process starts driving the run with this
        line; its lease (a ``DriveRun`` row claimed for it in the same transaction) is then
        ``self.drive``."""
        run = self.run(run_id)
        if run.lines != expected_lines:
            raise VersionConflictError(stream_id(run_id), expected_lines + 1, run.version)
        body = line_body(event, line, commands, extra)
        if not body.get("event_id"):
            body["event_id"] = new_event_id()
        meta = {
            "definition_path": run.definition_path, "definition_sha256": run.definition_sha256,
            "definition_file": run.definition_file, "assets": dict(run.assets), "opened_at_ms": run.opened_at_ms,
            "owner_pid": owner_pid if owner_pid is not None else run.owner_pid,
        }
        seq = expected_lines + 1
        wake = wake_rows(stream_id(run_id), str(body["event_id"]), commands, line.at_ms, seq)
        if drive_for is not None:
            drive = DriveRun(run_id, seq)
            wake.append(NewCommand(f"{stream_id(run_id)}:drive:{seq}", drive.type, command_to_dict(drive), line.at_ms))
        done = self.store.append(stream_id(run_id), run.version, body, run_projection(state, meta, seq), wake,
                                 terminal=state.status.is_terminal, claim_for=drive_for)
        if drive_for is not None:
            self.drive = done.claimed
        return seq

    def events(self, run_id: str) -> list[EventRow]:
        return self.store.events(stream_id(run_id))

    def lines(self, run_id: str, after: int = 0) -> list[StoredLine]:
        """The run's record, or its lines past line ``after``."""
        out: list[StoredLine] = []
        for row in self.store.events(stream_id(run_id), after + 1):
            line = line_from_dict(row.body["line"])
            out.append(StoredLine(
                seq=row.version - 1, state=line.state, next_state=line.next_state, kind=line.kind,
                event_type=line.event_type, event=recased(line.event), summary=recased(line.summary),
                written=_in_todays_words(line.written),
                commands=list(row.body.get("commands", [])), at_ms=line.at_ms,
            ))
        return out

    # ---------------------------------------------------------------- items

    def ledger(self, loop: str) -> tuple[ItemLedger, ...]:
        """The items' standing the loop's newest run holds (a new run carries it on)."""
        newest = self.latest_run(loop)
        return () if newest is None else newest.state.items

    def item_payload(self, run_id: str, item_id: str) -> Mapping[str, Any] | None:
        """The item as the source listed it last in this run (kept with its ItemsFound line)."""
        for row in reversed(self.events(run_id)):
            if row.type == ItemsFound.type:
                payloads = row.body.get("payloads") or {}
                if item_id in payloads:
                    return dict(payloads[item_id])
        return None

    # ---------------------------------------------------------------- passes

    def passes(self, run_id: str) -> list[Mapping[str, Any]]:
        """The pass records, in order (each kept with its RecordAppended line)."""
        return [_in_todays_words(row.body["record"]) for row in self.events(run_id)
                if row.type == RecordAppended.type and isinstance(row.body.get("record"), Mapping)]

    # ---------------------------------------------------------------- gates

    def pending_approvals(self, run_id: str | None = None) -> list[ApprovalRow]:
        """Gates of runs that wait in AWAITING_HUMAN for a person's decision."""
        runs = [self.run(run_id)] if run_id is not None else self.runs(limit=_ALL_RUNS)
        out: list[ApprovalRow] = []
        for run in sorted(runs, key=lambda r: run_number(r.run_id)):
            s = run.state
            if s.status is not LoopStatus.AWAITING_HUMAN or s.current is None:
                continue
            cur, cfg = s.current, s.config
            started = cur.gate_started_at_ms or run.updated_at_ms
            timeout = None if cfg.gate_timeout_ms is None else started + cfg.gate_timeout_ms
            out.append(ApprovalRow(run.run_id, cur.proposal_hash, cur.item, cur.attempt, cfg.gate_role or "",
                                   dict(cur.shown), started, timeout))
        return out


_STATE_KEYS = ("state", "resume_in", "run_again")  # what a line writes down that names a state


def _in_todays_words(written: Mapping[str, Any]) -> dict[str, Any]:
    """What a line or a pass record wrote, its verdict and the states it names in today's
    casing (a run recorded before the loop spoke one casing wrote PASS, "no result", RUNNING)."""
    out: dict[str, Any] = {k: _in_todays_words(v) if isinstance(v, Mapping) else v for k, v in written.items()}
    verdict = out.get("verdict")
    if isinstance(verdict, str):
        out["verdict"] = str(LEGACY_VERDICTS.get(verdict, verdict))
    for key in _STATE_KEYS:
        named = out.get(key)
        if isinstance(named, str) and named.upper() in LoopStatus.__members__:
            out[key] = str(LoopStatus(named))
    return out


def record_of(command: AppendRecord) -> dict[str, Any]:
    """A pass record as kept with its RecordAppended line."""
    return command_to_dict(command)


def _run_row(row: StoredTask) -> RunRow:
    projection = row.state
    meta = projection.get("meta") or {}
    state = state_from_dict(projection["state"])
    pid = meta.get("owner_pid")
    return RunRow(
        run_id=row.task_id[len(RUN_PREFIX):],
        loop=row.workflow,
        status=state.status,
        state=state,
        lines=int(projection.get("lines", row.version - 1)),
        version=row.version,
        definition_path=str(meta.get("definition_path", "")),
        definition_sha256=str(meta.get("definition_sha256", "")),
        opened_at_ms=int(meta.get("opened_at_ms", row.created_at_ms)),
        updated_at_ms=row.updated_at_ms,
        assets=dict(meta.get("assets") or {}),
        owner_pid=pid if isinstance(pid, int) else None,
        definition_file=str(meta.get("definition_file") or ""),
    )


def run_dict(run: RunRow, *, running: bool) -> dict[str, Any]:
    """A run as plain JSON types (``loop status --json`` and the HTTP API)."""
    s = run.state
    return {
        "run": run.run_id,
        "loop": run.loop,
        "status": str(run.status),
        "reason": s.reason,
        "passes": s.passes,
        "since_last_close": s.passes_since_last_close,
        "tokens_spent": s.tokens_spent,
        "money_spent_usd": s.money_spent_usd,
        "line_count": run.lines,
        "held": run.held,
        "cleared_by": run.cleared_by,
        "cleared_reason": run.cleared_reason,
        "running": running,
        "owner_pid": run.owner_pid,
        "waiting_on_task": waiting_on(run),
        "items": {i.id: {"status": str(i.status), "attempts": i.attempts} for i in s.items},
    }


def waiting_on(run: RunRow) -> str | None:
    """The pass's task a run sleeps on in RUNNING (it waits for a person), if any."""
    cur = run.state.current
    if run.status is LoopStatus.RUNNING and cur is not None and cur.asleep and cur.task_id:
        return cur.task_id
    return None


def line_dict(line: StoredLine) -> dict[str, Any]:
    """A record line as plain JSON types (``loop show --json`` and the HTTP API)."""
    return {
        "seq": line.seq,
        "state": str(line.state),
        "event": line.event,
        "written": line.written,
        "summary": line.summary,
        "next_state": str(line.next_state),
        "kind": str(line.kind),
        "event_type": line.event_type,
        "at_ms": line.at_ms,
    }
