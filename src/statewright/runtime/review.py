"""The review (seed 002's review screen): what an approver or operator needs to decide about
one task, in one place.

    what will change   the canonical proposal in full, each artifact's text (a diff where
                       the work is a diff), the hash an approval quotes
    why it stopped     waiting for whom, or the halt's step, reason and detail
    the evidence       what the input carries as evidence, and what people supplied since
    checks             every code and wait step attempt, with its outcome and detail
    verdicts, notes    every ai attempt's verdict and note
    who may approve    the step's role (and scope), the people holding it, less those
                       separation of duty keeps out; the reason codes a rejection takes
    expiry             as a date and time

``review(engine, task_id)`` returns it as plain JSON types; ``review_lines`` renders it."""

from __future__ import annotations

import json
from typing import Any, Protocol

from statewright._names import holds_role, is_agent_identity, scope_text
from statewright._time import when
from statewright.definition.model import StepKind
from statewright.machine.paths import RefError
from statewright.machine.state import TaskState, TaskStatus
from statewright.machine.task import approver_scope
from statewright.runtime.history import proposal_view
from statewright.runtime.users import Users


class Reader(Protocol):
    """What a review reads: a task's state and the people (an ``Engine`` is one)."""

    users: Users

    def state(self, task_id: str) -> TaskState: ...


def review(engine: Reader, task_id: str) -> dict[str, Any]:
    st = engine.state(task_id)
    out: dict[str, Any] = {
        "task_id": st.task_id,
        "workflow": {"name": st.workflow.name, "version": st.workflow.version, "hash": st.workflow.content_hash},
        "status": st.status.value,
        "step": st.current.step if st.current else (st.halt.step if st.halt else None),
        "why": _why(st),
        "since": when(st.updated_at_ms),
        "input": dict(st.input),
        "evidence": _evidence(st),
        "checks": [_attempt(a) for a in st.attempts if a.kind in (StepKind.CODE.value, StepKind.WAIT.value)],
        "verdicts": [{**_attempt(a), "verdict": a.verdict, "note": a.note}
                     for a in st.attempts if a.kind == StepKind.AI.value],
        "results": {k: dict(v) for k, v in st.results.items()},
    }
    view = proposal_view(st)
    if view is not None and st.current is not None:
        step = st.workflow.step(st.current.step)
        out["proposal"] = view["proposal"]
        out["artifacts"] = view["artifact_texts"]
        out["proposal_hash"] = view["proposal_hash"]
        out["expires"] = when(st.current.expires_at_ms) if st.current.expires_at_ms is not None else None
        out["approvers"] = _approvers(engine, st)
        out["reject_codes"] = list(st.workflow.reject_codes_of(step))
    return out


def _why(st: TaskState) -> str:
    cur = st.current
    if st.status is TaskStatus.AWAITING_APPROVAL and cur is not None:
        step = st.workflow.step(cur.step)
        return f"waits at {cur.step!r} for an approval by the role {_needed(st, step.approvers_role or '', step)!r}"
    if st.status is TaskStatus.HALTED and st.halt is not None:
        return f"halted at {st.halt.step!r}: {st.halt.reason}" + (f" ({st.halt.detail})" if st.halt.detail else "")
    if st.status is TaskStatus.WAITING and cur is not None:
        step = st.workflow.step(cur.step)
        return f"waits at {cur.step!r}: {cur.checks} of {step.max_checks} checks done, the next on a timer"
    if cur is not None:
        return f"running {cur.step!r} (attempt {cur.attempt})"
    return st.status.value


def _needed(st: TaskState, role: str, step: Any) -> str:
    try:
        scope = approver_scope(st, step)
    except RefError as exc:
        return f"{role} (scope unreadable: {exc})"
    return f"{role}:{scope_text(scope)}" if scope else role


def _evidence(st: TaskState) -> list[dict[str, Any]]:
    given = st.input.get("evidence")
    out: list[dict[str, Any]] = []
    if isinstance(given, list):
        out += [{"from": "input", "evidence": e} for e in given]
    out += [{"from": e.actor, "at": when(e.at_ms), "evidence": dict(e.evidence), "note": e.note} for e in st.evidence]
    return out


def _attempt(a: Any) -> dict[str, Any]:
    return {"step": a.step, "attempt": a.number, "actor": a.actor, "outcome": a.outcome.value,
            "reason": a.reason, "detail": a.detail, "ended": when(a.ended_at_ms)}


def _approvers(engine: Reader, st: TaskState) -> dict[str, Any]:
    """Who may approve: the role needed, and the active people holding it for this task,
    less those who acted in a step separation of duty names."""
    assert st.current is not None
    step = st.workflow.step(st.current.step)
    role = step.approvers_role or ""
    kept_out = {a.actor for other in step.separate_from for a in st.attempts_of(other)}
    people = [p.name for p in engine.users.people() if p.active and may_approve(st, p.name, p.roles)]
    return {"role": _needed(st, role, step), "people": sorted(people), "separated": sorted(kept_out)}


def may_approve(st: TaskState, name: str, roles: tuple[str, ...]) -> bool:
    """Whether the person ``name`` holding ``roles`` may approve the step ``st`` waits at:
    the step's role for the task's scope, no act in a step separation of duty names, and no
    agent role (an agent identity never approves)."""
    if st.status is not TaskStatus.AWAITING_APPROVAL or st.current is None or is_agent_identity(roles):
        return False
    step = st.workflow.step(st.current.step)
    if any(a.actor == name for other in step.separate_from for a in st.attempts_of(other)):
        return False
    role = step.approvers_role or ""
    if not role:
        return True
    try:
        scope = approver_scope(st, step)
    except RefError:
        return False
    return holds_role(role, scope, roles)


def review_lines(data: dict[str, Any]) -> list[str]:
    """The review to read at a terminal."""
    lines = [f"task {data['task_id']}  {data['workflow']['name']} v{data['workflow']['version']}  "
             f"{data['status']} since {data['since']}", f"why: {data['why']}"]
    if "proposal" in data:
        lines.append(f"what will change (proposal hash {data['proposal_hash']}):")
        text = json.dumps(data["proposal"], indent=2, sort_keys=True, ensure_ascii=False, default=str)
        lines += ["  " + line for line in text.splitlines()]
        for name, body in data["artifacts"].items():
            lines.append(f"artifact {name}:")
            lines += ["  | " + line for line in str(body).splitlines() or [""]]
    if data["evidence"]:
        lines.append("evidence:")
        for e in data["evidence"]:
            who = "input" if e["from"] == "input" else f"{e['from']} at {e['at']}"
            note = f"  ({e['note']})" if e.get("note") else ""
            lines.append(f"  {who}: {json.dumps(e['evidence'], ensure_ascii=False, sort_keys=True)}{note}")
    if data["checks"]:
        lines.append("checks:")
        lines += [_attempt_line(a) for a in data["checks"]]
    if data["verdicts"]:
        lines.append("verdicts and notes:")
        for a in data["verdicts"]:
            lines.append(_attempt_line(a))
            if a["verdict"] is not None:
                lines.append("      verdict: " + json.dumps(a["verdict"], ensure_ascii=False, sort_keys=True))
            if a["note"]:
                lines.append(f"      note: {a['note']!r}")
    if "approvers" in data:
        ap = data["approvers"]
        lines.append(f"who may approve: role {ap['role']!r}: {', '.join(ap['people']) or 'nobody holds it now'}"
                     + (f" (not {', '.join(ap['separated'])}: separation of duty)" if ap["separated"] else ""))
        lines.append("expires: " + (data["expires"] or "never"))
        lines.append("reject with one of: " + ", ".join(data["reject_codes"]))
        lines.append(f"approve with: statewright approve {data['task_id']} --hash {data['proposal_hash']}")
    return lines


def _attempt_line(a: dict[str, Any]) -> str:
    mark = "ok  " if a["outcome"] == "passed" else "FAIL"
    why = f"  {a['reason']}: {a['detail']}" if a["outcome"] != "passed" else (f"  {a['detail']}" if a["detail"] else "")
    return f"  {mark} {a['step']} #{a['attempt']} ({a['actor']}, {a['ended']}){why}"
