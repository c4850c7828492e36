"""Replaying a task's event log rebuilds every result exactly, on every backend."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings, target
from hypothesis import strategies as st

from statewright._canonical import canonical_json
from statewright.definition.loader import workflow_from_dict
from statewright.machine.events import (
    AttemptReported,
    CheckReported,
    Event,
    TaskRetried,
    TimerFired,
    event_from_dict,
)
from statewright.machine.state import TaskState, TaskStatus, new_task
from statewright.machine.task import transition
from statewright.runtime.engine import Engine
from statewright.runtime.screen import screen
from strategies import HOSTILE_JSON

LOOP = {"loop_back": "analyse", "max_attempts": 3}
WORKFLOW = workflow_from_dict({"workflow": "replay", "steps": [
    {"id": "analyse", "kind": "code", "owner": "t", "run": {"command": ["true"]}},
    {"id": "ci", "kind": "wait", "owner": "t", "check": {"command": ["true"]}, "every": "1m", "max_checks": 2,
     "on_failure": LOOP},
    {"id": "review", "kind": "ai", "owner": "t", "agent": {"type": "command", "command": ["true"]},
     "output_schema": {"type": "object", "properties": {"approved": {"type": "boolean"}, "notes": {}},
                       "required": ["approved"]},
     "on_failure": LOOP},
    {"id": "triage", "kind": "ai", "owner": "t", "agent": {"type": "command", "command": ["true"]},
     "on_failure": LOOP},
    {"id": "publish", "kind": "code", "owner": "t", "run": {"command": ["true"]}, "result_limit": 300,
     "output_schema": {"type": "object", "properties": {"id": {"type": "integer"}}}},
]})
OBJECTS = st.dictionaries(st.text(max_size=6), HOSTILE_JSON, max_size=4)


@st.composite
def _answer(draw: st.DrawFn, state: TaskState, n: int) -> Event:
    """An event answering what the task waits for, with drawn outcomes and data."""
    common: dict[str, Any] = {"event_id": f"{state.task_id}:e{n}", "at_ms": 1_000 * n}
    cur = state.current
    if state.status is TaskStatus.HALTED or cur is None:
        return TaskRetried(**common, actor="olga", reason="try again")
    if state.status is TaskStatus.WAITING:
        return TimerFired(**common, timer_id=cur.timer_id)
    if cur.step == "ci":
        return CheckReported(**common, command_id=cur.command_id, step="ci", attempt=cur.attempt,
                             check_number=cur.checks + 1, passed=draw(st.booleans()),
                             detail=draw(st.text(max_size=10)), body=draw(st.none() | HOSTILE_JSON))
    fields: dict[str, Any] = {"command_id": cur.command_id, "step": cur.step, "attempt": cur.attempt,
                              "actor": "agent:x" if cur.step == "review" else "code:x", "ok": draw(st.booleans())}
    if not fields["ok"]:
        fields["error"] = "exit_status"
    if cur.step == "review":
        fields["verdict"] = {"approved": draw(st.booleans()), "notes": draw(HOSTILE_JSON)}
    elif cur.step == "triage":  # no output_schema: a verdict, or none at all
        fields["verdict"] = draw(st.none() | OBJECTS)
    else:
        fields["result"] = draw(st.none() | OBJECTS | st.fixed_dictionaries({"id": st.integers(0, 9)}))
    return AttemptReported(**common, **fields)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_replaying_the_log_rebuilds_every_result(engine: Engine, data: st.DataObject) -> None:
    """Whatever the steps hand back (hostile JSON screened as the worker screens it, loop-backs,
    attempts that record no result, retries, failed checks), the results the engine keeps are
    the results a fresh replay of the stored events gives, exactly (1 is not 1.0)."""
    tid = engine.submit(WORKFLOW, {"n": 1})
    for n in range(data.draw(st.integers(1, 18), label="events")):
        state = engine.state(tid)
        if state.terminal and state.status is not TaskStatus.HALTED:
            break
        event = data.draw(_answer(state, n))
        step = state.workflow.step(state.current.step) if state.current else None
        engine.apply(tid, screen(event, step.result_limit_bytes) if step else event)
    kept = engine.state(tid)
    target(len(kept.results), label="steps with a result")
    replayed = new_task(tid, WORKFLOW)
    for logged in engine.events(tid):
        replayed, _ = transition(replayed, event_from_dict(_round_trip(logged)))
    assert canonical_json(dict(replayed.results)) == canonical_json(dict(kept.results))
    assert replayed.version == kept.version


def _round_trip(event: Event) -> dict[str, Any]:
    """The event as its logged JSON reads back."""
    import json

    return dict(json.loads(canonical_json(event.to_dict())))
