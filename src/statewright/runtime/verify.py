"""``statewright verify``: check every task's hash chain, replay its log through the reducer,
and compare the result with the stored task row; then the people log the same way
(store/people.py: its chain, its rows, and the people and tokens tables against its replay).
Rows are read as stored and judged as hostile: whatever is wrong with one becomes one line
naming the task (or ``people``), never a traceback.

What is checked, per stream id found in the task rows or in the event rows (a task, or a run
of an outer loop, whose log replays through the loop machine instead):
- the chain: versions 1..N without gaps, each ``prev_hash`` the link before it, each link
  recomputed (store/chain.py), keyed links with the key given, nothing unkeyed after a
  keyed link, and with a key given the last link keyed by it (it covers all before it);
- each event row's ``type``, ``event_id`` and ``at_ms`` columns against its body;
- the task row: present, its ``last_hash`` the last event's link, its definition stored
  under its own hash, and every column of its projection what the replay gives."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from statewright._canonical import canonical_json
from statewright._record import record
from statewright.definition.loader import workflow_from_dict
from statewright.machine.events import event_from_dict
from statewright.machine.loop import LOOP_MACHINE
from statewright.machine.loop.codec import casing_blind, command_to_dict, line_to_dict, state_to_dict
from statewright.machine.loop.events import RunOpened
from statewright.machine.seam import StreamKind
from statewright.machine.state import TaskState, new_task, projection
from statewright.machine.task import transition
from statewright.runtime.engine import Engine
from statewright.store.chain import GENESIS_HASH, NOT_KEYED, RawEvent, check_chain

_MAX_PROBLEM_CHARS = 300
_READS = 5  # tries at reading a task row and its events with no append in between
OLDER_PROJECTION = (
    "the stored projection lacks fields the replay records (written by an older statewright); "
    "'statewright db upgrade' adds them"
)


@record
class Finding:
    task_id: str
    problem: str


def _one_line(text: object) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= _MAX_PROBLEM_CHARS else line[: _MAX_PROBLEM_CHARS - 3] + "..."


def _json_object(text: object, what: str, say: Callable[[str], None],
                 unparsed: str = "is not JSON ({why})") -> dict[str, Any] | None:
    """``text`` parsed as a JSON object, or None after saying (one line) why it is not one."""
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError) as exc:
        say(f"{what} {unparsed.format(why=_why(exc))}")
        return None
    if not isinstance(value, dict):
        say(f"{what} is not a JSON object (got {type(value).__name__})")
        return None
    return value


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _int(value: Any) -> int | None:
    """An integer column's value, or None when an edit left something else there."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Report:
    def __init__(self, task_id: str) -> None:
        # a task id read from an edited row may hold a line break or a terminal escape
        self.task_id = task_id if task_id.isprintable() and task_id.strip() == task_id else repr(task_id)
        self.findings: list[Finding] = []

    def __call__(self, problem: object) -> None:
        self.findings.append(Finding(self.task_id, _one_line(problem)))


def _bodies(rows: list[RawEvent], say: _Report) -> list[dict[str, Any]] | None:
    """Each event body as an object, its columns checked against it; None when one is
    unreadable (then there is nothing to replay)."""
    out: list[dict[str, Any]] = []
    for position, row in enumerate(rows, start=1):
        where = f"event version {row.version}" if _int(row.version) is not None else f"event at position {position}"
        body = _json_object(row.body, f"{where}: the body", say)
        if body is None:
            return None
        for column, value in (("type", row.type), ("event_id", row.event_id), ("at_ms", row.at_ms)):
            if body.get(column) != value or type(body.get(column)) is not type(value):
                say(f"{where}: column {column} is {value!r} but the body says {body.get(column)!r}")
        out.append(body)
    return out


def verify_task(engine: Engine, task_id: str) -> list[Finding]:
    return _checked(engine, task_id)[0]


def _checked(engine: Engine, task_id: str) -> tuple[list[Finding], TaskState | None]:
    """The findings, and the state the log replays to (None when it could not be replayed)."""
    say = _Report(task_id)
    try:
        state = _verify(engine, task_id, say)
    except Exception as exc:  # a hostile row must end as a finding, whatever it breaks
        say(f"cannot be checked: {_why(exc)}")
        state = None
    return say.findings, state


def _lacks_only_fields(stored: Any, replayed: Any) -> bool:
    """True when ``stored`` is ``replayed`` with some object members missing: a projection
    written before those fields were recorded."""
    if isinstance(stored, dict) and isinstance(replayed, dict):
        return stored.keys() <= replayed.keys() and all(_lacks_only_fields(v, replayed[k]) for k, v in stored.items())
    if isinstance(stored, list) and isinstance(replayed, list):
        return len(stored) == len(replayed) and all(map(_lacks_only_fields, stored, replayed))
    return type(stored) is type(replayed) and bool(stored == replayed)


def _verify(engine: Engine, task_id: str, say: _Report) -> TaskState | None:
    store = engine.store
    for _ in range(_READS):  # a worker may append meanwhile: read until the task row held still
        task = store.raw_task(task_id)
        rows = store.raw_events(task_id)
        if store.raw_task(task_id) == task:
            break
    check_chain(rows, store.chain, say)
    bodies = _bodies(rows, say)
    if task is None:
        say(f"task row missing, but {len(rows)} events remain")
        return None
    _tid, name, workflow_hash, status, version, state_text, created_at_ms, updated_at_ms, last_hash = task
    if not rows:
        say("no events: the task row has no history")
        return None
    if last_hash != rows[-1].hash:
        say(f"the task row's last hash is not the link of its last event (version {rows[-1].version}): "
            "events were removed or added")
    stored = _json_object(state_text, "the stored projection", say, "is not readable: {why}")
    if stored is None:
        return None
    loaded = store.load(task_id)
    if loaded is not None and loaded.kind == str(StreamKind.LOOP_RUN):
        if bodies is not None:
            _verify_loop_run(bodies, stored, (status, version, name), say)
        return None
    try:  # from the store, not the engine's memory: the stored row is what is checked
        body = store.get_definition(str(workflow_hash))
        if body is None:
            say(f"stored definition {str(workflow_hash)[:12]} is missing")
            return None
        wf = workflow_from_dict(body, f"stored:{str(workflow_hash)[:12]}")
    except Exception as exc:
        say(f"stored definition {str(workflow_hash)[:12]} cannot be read: {_why(exc)}")
        return None
    if wf.content_hash != workflow_hash:
        say(f"stored definition {str(workflow_hash)[:12]} does not match its hash")
    if bodies is None:
        return None
    state = new_task(task_id, wf)
    try:
        for body in bodies:
            state, _ = transition(state, event_from_dict(body))
    except Exception as exc:
        say(f"replay failed: {_why(exc)}")
        return None
    if canonical_json(state.to_dict()) != canonical_json(stored):
        if _lacks_only_fields(stored, json.loads(canonical_json(state.to_dict()))):
            say(OLDER_PROJECTION)
        else:
            say("replayed state differs from the stored projection")
    replayed = {
        "version": state.version, "status": state.status.value, "workflow": wf.name,
        "created_at_ms": state.created_at_ms, "updated_at_ms": state.updated_at_ms,
    }
    columns = {"version": version, "status": status, "workflow": name,
               "created_at_ms": created_at_ms, "updated_at_ms": updated_at_ms}
    for column, value in columns.items():
        if value != replayed[column] or type(value) is not type(replayed[column]):
            say(f"stored {column} {value!r}, replayed {replayed[column]!r}")
    return state


def _verify_loop_run(bodies: list[dict[str, Any]], stored: dict[str, Any], columns: tuple[Any, Any, Any],
                     say: _Report) -> None:
    """A loop run's stream replayed through the loop machine (statewright.machine.loop): from
    its ``RunOpened``, every event must give the record line and the commands it was stored
    with, and the last state the stored projection and columns."""
    if bodies[0].get("type") != RunOpened.type:
        say(f"event version 1 is {bodies[0].get('type')!r}, not RunOpened: the run's start is missing")
        return
    try:
        opened = LOOP_MACHINE.event_from_dict(bodies[0])
        state = LOOP_MACHINE.opened(opened) if isinstance(opened, RunOpened) else None
        if state is None:
            return
        for version, body in enumerate(bodies[1:], start=2):
            step = LOOP_MACHINE.transition(state, LOOP_MACHINE.event_from_dict(body))
            line = line_to_dict(step.line) if step.line is not None else None
            if not _same_loop_json(line, body.get("line")):
                say(f"event version {version}: its record line is not the line the replay writes")
            commands = [command_to_dict(c) for c in step.commands]
            if not _same_loop_json(commands, body.get("commands")):
                say(f"event version {version}: its commands are not the commands the replay asks for")
            state = step.state
    except Exception as exc:
        say(f"replay failed: {_why(exc)}")
        return
    if not _same_loop_json(state_to_dict(state), stored.get("state")):
        say("replayed loop state differs from the stored projection")
    status, version, loop = columns
    replayed = {"status": str(state.status), "version": len(bodies), "workflow": state.config.loop}
    for column, value in {"status": status, "version": version, "workflow": loop}.items():
        if not _same_loop_json(replayed[column], value) or type(value) is not type(replayed[column]):
            say(f"stored {column} {value!r}, replayed {replayed[column]!r}")


def _same_loop_json(replayed: Any, stored: Any) -> bool:
    """The replay wrote what is stored: the same JSON, or, for a run recorded before the loop
    spoke one casing (upper-case states, verdicts such as "no result"), the same in today's."""
    return (canonical_json(replayed) == canonical_json(stored)
            or canonical_json(casing_blind(replayed)) == canonical_json(casing_blind(stored)))


def verify_all(engine: Engine) -> tuple[int, list[Finding]]:
    ids = engine.store.logged_task_ids()
    findings: list[Finding] = []
    for tid in ids:
        findings.extend(verify_task(engine, tid))
    return len(ids), findings


def upgrade_history(engine: Engine) -> tuple[int, int, list[Finding]]:
    """What ``statewright db upgrade`` does to the history, task by task, for every task that
    verifies but for its format: rewrite its chain in the store's current format (legacy
    format-1 links; unkeyed links when a key is set), and write the projection the log
    replays to when the stored one only lacks fields an older statewright did not record.
    A task with any other finding is left as it is and its findings returned: an upgrade
    never blesses a damaged history. Returns (chains rewritten, projections rewritten,
    findings)."""
    store = engine.store
    chain = store.chain
    chains = projections = 0
    left: list[Finding] = []
    for tid in store.logged_task_ids():
        findings, state = _checked(engine, tid)
        other = [f for f in findings if not f.problem.startswith(NOT_KEYED) and f.problem != OLDER_PROJECTION]
        if other or state is None:
            left.extend(other)
            continue
        rows = store.raw_events(tid)
        if len(rows) != state.version:
            left.append(Finding(tid, _MOVED_ON))
            continue
        if any(f.problem == OLDER_PROJECTION for f in findings):
            if not store.replace_projection(tid, state.version, projection(state)):
                left.append(Finding(tid, _MOVED_ON))
                continue
            projections += 1
        if all(chain.is_current(str(r.hash)) for r in rows):
            continue
        links: list[tuple[str, str]] = []
        prev = GENESIS_HASH
        for r in rows:
            h = chain.link(str(r.task_id), int(r.version), str(r.event_id), str(r.type), int(r.at_ms),
                           prev, str(r.body))
            links.append((prev, h))
            prev = h
        if store.rechain(tid, len(rows), links):
            chains += 1
        else:
            left.append(Finding(tid, _MOVED_ON))
    return chains, projections, left


_MOVED_ON = "moved on while it was upgraded; run 'statewright db upgrade' again"
PEOPLE = "people"  # what a finding about the people log names instead of a task


def verify_people(engine: Engine) -> list[Finding]:
    """The people log's findings (``people_problems``), one per line, named ``people``."""
    return [Finding(PEOPLE, _one_line(p)) for p in engine.store.people_problems()]


def upgrade_people(engine: Engine) -> tuple[bool, list[Finding]]:
    """What ``statewright db upgrade`` does to the people log: when its only finding is its
    format (legacy links; unkeyed links when a key is set), rewrite its whole chain in the
    store's current format. A log with any other finding is left as it is and its findings
    returned. Returns (rewritten, findings)."""
    store = engine.store
    findings = verify_people(engine)
    other = [f for f in findings if not f.problem.startswith(NOT_KEYED)]
    if other:
        return False, other
    rows = store.raw_people_log()
    if all(store.chain.is_current(str(r.hash)) for r in rows):
        return False, []
    links: list[tuple[str, str]] = []
    prev = GENESIS_HASH
    for r in rows:
        h = store.chain.people_link(int(r.seq), int(r.at_ms), str(r.actor), str(r.action), str(r.subject), prev,
                                    str(r.body))
        links.append((prev, h))
        prev = h
    if store.rechain_people(str(rows[-1].hash), links):
        return True, []
    return False, [Finding(PEOPLE, f"the people log {_MOVED_ON}")]
