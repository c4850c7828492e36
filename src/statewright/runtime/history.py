"""A task's history as a straight line with annotated detours."""

from __future__ import annotations

import json
from typing import Any

from statewright.approvals.proposal import build_proposal
from statewright.machine.state import Outcome, TaskState, TaskStatus
from statewright.store.base import StoredTask


def _short(text: str, n: int = 70) -> str:
    line = " ".join(text.split())
    return line if len(line) <= n else line[: n - 3] + "..."


def history_lines(state: TaskState) -> list[str]:
    """One line per attempt; loop-backs, early exits, approvals and operator acts marked."""
    lines: list[str] = []
    ops = sorted(state.operator_actions, key=lambda o: o.at_ms)
    events: list[tuple[int, int, str]] = []
    for i, a in enumerate(state.attempts):
        mark = {"passed": "ok  ", "failed": "FAIL", "halted": "STOP"}[a.outcome.value]
        why = a.reason
        if a.outcome is Outcome.FAILED and a.detail:
            why = f"{a.reason}: {_short(a.detail, 60)}"
        elif a.outcome is Outcome.PASSED and a.kind == "human":
            h = str((a.verdict or {}).get("proposal_hash", ""))[:12]
            why = f"approved by {a.actor}, proposal {h}"
        line = f"{mark} {a.step:<14} {a.kind:<5} #{a.number:<2} {a.actor:<22} {why}".rstrip()
        if a.deliveries > 1:
            line += f"   (redelivered: started {a.deliveries} times)"
        if a.retries:
            line += f"   ({a.retries} transient {'error' if a.retries == 1 else 'errors'} retried)"
        if a.note:
            line += f'   note: "{_short(a.note, 40)}"'
        events.append((a.ended_at_ms, i * 2, line))
        if a.route.startswith("loop_back"):
            events.append((a.ended_at_ms, i * 2 + 1, f"       <- {a.route.replace('->', ' to ')}"))
        elif a.route == "complete" and state.status.value == "completed_early":
            events.append((a.ended_at_ms, i * 2 + 1, "       => complete early (later steps skipped)"))
        elif a.route.startswith("continue (advisory)"):
            events.append((a.ended_at_ms, i * 2 + 1, "       -> advisory failure, continue"))
        elif a.route.startswith("halt"):
            events.append((a.ended_at_ms, i * 2 + 1, f"       !! {a.route}"))
    for o in ops:
        events.append((o.at_ms, 10**9, f"OPER {o.action:<14} by {o.actor}: {_short(o.reason, 60)}"))
    events.sort(key=lambda e: (e[0], e[1]))
    lines.extend(e[2] for e in events)
    cur = state.current
    if cur is not None:
        if state.status.value == "awaiting_approval":
            lines.append(f"...  {cur.step:<14} waits for approval of proposal {cur.proposal_hash}")
        else:
            lines.append(f"...  {cur.step:<14} attempt #{cur.attempt} in flight ({state.status.value})")
    return lines


def summary(state: TaskState) -> dict[str, Any]:
    d: dict[str, Any] = {
        "task_id": state.task_id,
        "workflow": state.workflow.name,
        "workflow_version": state.workflow.version,
        "workflow_hash": state.workflow.content_hash,
        "status": state.status.value,
        "version": state.version,
        "step": state.current.step if state.current else None,
    }
    if state.halt:
        d["halt"] = {"step": state.halt.step, "reason": state.halt.reason, "detail": state.halt.detail}
    if state.current and state.current.proposal_hash:
        d["proposal_hash"] = state.current.proposal_hash
    return d


def task_row(r: StoredTask) -> dict[str, Any]:
    """One task as ``statewright tasks --json`` and the HTTP API list it: where it stands,
    and why a halted one halted (read from its stored row, without loading its workflow)."""
    from statewright._time import when

    halt = r.state.get("halt") or {}
    step = (r.state.get("current") or {}).get("step") or halt.get("step")
    why = f"{halt.get('reason', '')}: {halt.get('detail', '')}".rstrip(": ") if r.status == "halted" else ""
    return {"task_id": r.task_id, "workflow": r.workflow, "status": r.status, "version": r.version,
            "step": step, "halt_reason": halt.get("reason"), "why": why[:80], "updated_at_ms": r.updated_at_ms,
            "updated": when(r.updated_at_ms)}


def proposal_view(state: TaskState) -> dict[str, Any] | None:
    """What the approver of the step a task waits at decides on: the proposal its hash
    covers, and the text of each declared artifact (covered by the sha256 shown with it).
    None when the task waits for no approval."""
    cur = state.current
    if cur is None or state.status is not TaskStatus.AWAITING_APPROVAL:
        return None
    return {
        "step": cur.step,
        "proposal_hash": cur.proposal_hash,
        "proposal": build_proposal(state, state.workflow.index_of(cur.step)),
        "artifact_texts": {name: entry.get("text", "") for name, entry in cur.captured.items()},
    }


def proposal_lines(state: TaskState) -> list[str]:
    """The proposal a task waits on, to read: its JSON, then each artifact's text."""
    view = proposal_view(state)
    if view is None:
        return []
    lines = [f"proposal at {view['step']} (hash {view['proposal_hash']}):"]
    text = json.dumps(view["proposal"], indent=2, sort_keys=True, ensure_ascii=False, default=str)
    lines += ["  " + line for line in text.splitlines()]
    for name, body in view["artifact_texts"].items():
        lines.append(f"artifact {name}:")
        lines += ["  | " + line for line in str(body).splitlines() or [""]]
    return lines


_LISTED_CHILDREN = 20  # past this many, the children that completed are counted, not listed


def family_lines(state: TaskState, children: dict[str, TaskState]) -> list[str]:
    """Where a task stands among its family: its parent, and its children's progress per
    step attempt that started them (how many ended and how), one line per child with the step
    a running one stands at. ``children`` holds the children's states by task id."""
    lines: list[str] = []
    if state.parent is not None:
        p = state.parent
        lines.append(f"child of {p.task_id} (step {p.step} #{p.attempt}, item {p.index})")
    groups: dict[tuple[str, int], list[Any]] = {}
    for c in state.children:
        groups.setdefault((c.step, c.attempt), []).append(c)
    for (step, attempt), group in groups.items():
        counts: dict[str, int] = {}
        for c in group:
            counts[c.status] = counts.get(c.status, 0) + 1
        told = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        ended = sum(not c.live for c in group)
        lines.append(f"children of {step} #{attempt}: {ended} of {len(group)} started ended ({told})")
        for c in group if len(group) <= _LISTED_CHILDREN else [c for c in group if not c.succeeded]:
            st = children.get(c.task_id)
            where = f" at {st.current.step}" if st is not None and c.live and st.current is not None else ""
            status = st.status.value if st is not None and c.live else c.status
            why = f": {_short(c.reason, 50)}" if c.reason else ""
            lines.append(f"  [{c.index}] {c.task_id}  {status}{where}{why}")
    return lines
