"""What each page of the web console shows, read from the engine as plain data (the
templates only lay it out):

    dashboard   counts by status and by time in state, the approval queue's waits, tasks
                oldest-in-state first, tasks over their step's allowance, halts by reason
    inbox       tasks the signed-in person may approve, oldest first
    halted      the operator queue: each halted task with its error in full
    task        the review (runtime/review.py), the history as a line with its detours
                (runtime/history.py), each attempt's verdict, artifacts and note, and the
                workflow drawn (export/svg.py)
    brief       one attempt's brief, rebuilt by replaying the log (a loop-back's brief lists
                every earlier attempt, so briefs are a page each, not inlined)"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from statewright._errors import StatewrightError
from statewright._time import duration, when
from statewright.definition.model import Step, StepKind, Workflow
from statewright.export.svg import to_svg
from statewright.machine.commands import RunStep
from statewright.machine.events import event_from_dict
from statewright.machine.state import TERMINAL, TaskState, TaskStatus, new_task
from statewright.machine.task import transition
from statewright.runtime.engine import Engine
from statewright.runtime.history import history_entries
from statewright.runtime.review import review
from statewright.runtime.users import Principal, Users
from statewright.store.base import StoredTask

SCAN_LIMIT = 10_000  # the most tasks a dashboard reads
_AGES = ((3600, "under 1h"), (86_400, "1h to 1d"), (7 * 86_400, "1d to 7d"), (float("inf"), "over 7d"))
_OPEN = [s.value for s in TaskStatus if s not in TERMINAL and s is not TaskStatus.NEW] + [TaskStatus.HALTED.value]


def _age_bucket(seconds: float) -> str:
    return next(name for bound, name in _AGES if seconds < bound)


def _workflow_of(engine: Engine, row: StoredTask) -> Workflow | None:
    digest = (row.state.get("workflow") or {}).get("hash")
    if not digest:
        return None
    try:
        return engine.workflow(str(digest))
    except StatewrightError:
        return None


def allowance_seconds(step: Step, status: str) -> float | None:
    """How long a task may sit at ``step`` in ``status`` before the dashboard calls it late:
    its ``stuck_after``, else an approval's expiry or a step's timeout; None: no bound."""
    if step.stuck_after_seconds is not None:
        return step.stuck_after_seconds
    if status == TaskStatus.AWAITING_APPROVAL.value:
        return step.expires_after_seconds
    if status == TaskStatus.WAITING.value and step.every_seconds and step.max_checks:
        return step.every_seconds * step.max_checks
    return step.timeout_seconds


def _row(r: StoredTask, now_ms: int) -> dict[str, Any]:
    cur = r.state.get("current") or {}
    halt = r.state.get("halt") or {}
    in_state = max(0, now_ms - r.updated_at_ms) / 1000
    return {"task_id": r.task_id, "workflow": r.workflow, "status": r.status, "version": r.version,
            "step": cur.get("step") or halt.get("step"), "in_state_seconds": in_state,
            "in_state": duration(in_state), "updated": when(r.updated_at_ms),
            "halt_reason": halt.get("reason", ""), "halt_detail": halt.get("detail", "")}


def dashboard(engine: Engine) -> dict[str, Any]:
    now = engine.clock.now_ms()
    counts = engine.store.counts_by_status()
    rows: list[StoredTask] = []
    for status in _OPEN:
        rows += engine.store.list_tasks(status=status, limit=SCAN_LIMIT)
    open_rows = [_row(r, now) for r in rows]
    by_age: dict[str, Counter[str]] = {}
    for row in open_rows:
        by_age.setdefault(row["status"], Counter())[_age_bucket(row["in_state_seconds"])] += 1
    waits = sorted(r["in_state_seconds"] for r in open_rows if r["status"] == TaskStatus.AWAITING_APPROVAL.value)
    late: list[dict[str, Any]] = []
    for r, row in zip(rows, open_rows, strict=True):
        cur = r.state.get("current") or {}
        wf = _workflow_of(engine, r) if cur.get("step") else None
        if wf is None:
            continue
        try:
            step = wf.step(str(cur["step"]))
        except KeyError:
            continue
        allowed = allowance_seconds(step, r.status)
        at_step = max(0, now - int(cur.get("started_at_ms") or r.updated_at_ms)) / 1000
        if allowed is not None and at_step > allowed:
            late.append(row | {"allowed": duration(allowed), "at_step": duration(at_step)})
    halted: dict[str, list[dict[str, Any]]] = {}
    for row in open_rows:
        if row["status"] == TaskStatus.HALTED.value:
            halted.setdefault(row["halt_reason"] or "unknown", []).append(row)
    oldest = sorted((r for r in open_rows if r["status"] != TaskStatus.HALTED.value),
                    key=lambda r: -r["in_state_seconds"])
    return {
        "counts": [(s.value, counts.get(s.value, 0)) for s in TaskStatus if s is not TaskStatus.NEW],
        "ages": [name for _, name in _AGES],
        "by_age": {status: [c.get(name, 0) for _, name in _AGES] for status, c in sorted(by_age.items())},
        "queue": {"waiting": len(waits), "oldest": duration(waits[-1]) if waits else "",
                  "median": duration(waits[len(waits) // 2]) if waits else ""},
        "oldest": oldest[:25],
        "late": sorted(late, key=lambda r: -r["in_state_seconds"]),
        "halted": sorted(halted.items(), key=lambda kv: (-len(kv[1]), kv[0])),
    }


def inbox(engine: Engine, who: Principal) -> list[dict[str, Any]]:
    """The tasks ``who`` may approve, the longest waiting first."""
    now = engine.clock.now_ms()
    rows = engine.store.list_tasks(status=TaskStatus.AWAITING_APPROVAL.value, limit=SCAN_LIMIT)
    states = engine.states([r.task_id for r in rows])
    mine = [r for r in rows if r.task_id in states and engine.may_approve(states[r.task_id], who)]
    return [_row(r, now) for r in sorted(mine, key=lambda r: r.updated_at_ms)]


def halted(engine: Engine) -> list[dict[str, Any]]:
    """The operator queue: halted tasks, the longest halted first, each with its error whole."""
    now = engine.clock.now_ms()
    rows = engine.store.list_tasks(status=TaskStatus.HALTED.value, limit=SCAN_LIMIT)
    return [_row(r, now) for r in sorted(rows, key=lambda r: r.updated_at_ms)]


def brief(engine: Engine, task_id: str, step: str, number: int) -> dict[str, Any] | None:
    """The brief the reducer built for attempt ``number`` of ``step`` (an ai or remote step),
    found by replaying the task's log up to it; None when no such attempt was started."""
    st = engine.state(task_id)
    replayed = new_task(st.task_id, st.workflow)
    for row in engine.store.events(task_id):
        replayed, commands = transition(replayed, event_from_dict(row.body))
        cur = replayed.current
        for c in commands:
            if isinstance(c, RunStep) and c.brief and cur is not None and (cur.step, cur.attempt) == (step, number):
                return dict(c.brief)
    return None


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


@dataclass
class _Loaded:
    """A review's reader over a state already loaded (the page reads the task once)."""

    users: Users
    loaded: TaskState

    def state(self, task_id: str) -> TaskState:
        return self.loaded


_MARKS = {"passed": "ok", "failed": "FAIL", "halted": "STOP"}
_ARROWS = {"loop_back": "\u21a9", "early_exit": "\u21d2", "advisory": "\u2192", "halt": "\u25a0"}
SHOWN_CHECKS = 20  # the review's checks and verdicts: the latest; the history holds them all


def task(engine: Engine, task_id: str, who: Principal) -> dict[str, Any]:
    st = engine.state(task_id)
    data = review(_Loaded(engine.users, st), task_id)
    for key in ("checks", "verdicts"):
        data[f"{key}_earlier"] = max(0, len(data[key]) - SHOWN_CHECKS)
        data[key] = data[key][-SHOWN_CHECKS:]
    minute = functools.lru_cache(maxsize=4096)(lambda m: when(m * 60_000))  # when() shows minutes

    def at(ms: int) -> str:
        return minute(ms // 60_000)

    base = f"/tasks/{quote(task_id, safe='')}/brief/"
    history: list[dict[str, Any]] = []
    for entry in history_entries(st):
        o = entry.get("operator")
        if o is not None:
            history.append({"operator": True, "action": o.action, "actor": o.actor, "reason": o.reason,
                            "at": at(o.at_ms), "step": o.step})
            continue
        a = entry["attempt"]
        history.append({
            "operator": False, "step": a.step, "kind": a.kind, "number": a.number, "actor": a.actor,
            "outcome": a.outcome.value, "why": entry["why"], "reason": a.reason, "detail": a.detail,
            "detour": entry["detour"], "deliveries": a.deliveries, "retries": a.retries, "note": a.note,
            "verdict": _pretty(a.verdict) if a.verdict is not None else None,
            "artifacts": dict(a.artifacts), "output": a.output,
            "brief_url": f"{base}{quote(a.step, safe='')}/{a.number}"
            if a.kind == StepKind.AI.value or st.workflow.step(a.step).remote is not None else None,
            "mark": _MARKS[a.outcome.value], "arrow": _ARROWS[entry["detour"][0]] if entry["detour"] else "",
            "cost_text": ", ".join(f"{k} {v}" for k, v in a.cost.items()),
            "started": at(a.started_at_ms), "ended": at(a.ended_at_ms),
        })
    cur = st.current
    data["proposal_text"] = _pretty(data["proposal"]) if "proposal" in data else None
    return {
        "task": data, "state": st, "history": history,
        "in_flight": None if cur is None else {"step": cur.step, "attempt": cur.attempt, "status": st.status.value},
        "svg": to_svg(st.workflow, current=cur.step if cur is not None else (st.halt.step if st.halt else None),
                      progress=_children_progress(st)),
        "may_approve": engine.may_approve(st, who),
        "halted": st.status is TaskStatus.HALTED,
        "cancellable": not st.terminal or st.status is TaskStatus.HALTED,
        "evidence_text": [_pretty(e) for e in data["evidence"]],
    }


def diff_lines(text: str) -> list[tuple[str, str]]:
    """An artifact's lines, each with its class when the text is a unified diff."""
    lines = str(text).splitlines()
    if not any(line.startswith(("diff --git", "--- ", "@@ ")) for line in lines[:50]):
        return [("", line) for line in lines]
    out: list[tuple[str, str]] = []
    for line in lines:
        if line.startswith(("+++", "---", "diff --git", "index ")):
            cls = "meta"
        elif line.startswith("@@"):
            cls = "hunk"
        elif line.startswith("+"):
            cls = "add"
        elif line.startswith("-"):
            cls = "del"
        else:
            cls = ""
        out.append((cls, line))
    return out


def task_versions(engine: Engine, task_ids: Sequence[str]) -> dict[str, int]:
    rows = engine.store.load_many(task_ids)
    return {tid: row.version for tid, row in rows.items()}


def _children_progress(st: TaskState) -> dict[str, str]:
    """Each map step's children of its latest attempt, counted by how they stand."""
    out: dict[str, str] = {}
    for step in st.workflow.steps:
        kids = [c for c in st.children if c.step == step.id]
        if not kids:
            continue
        latest = max(c.attempt for c in kids)
        counts = Counter(c.status for c in kids if c.attempt == latest)
        out[step.id] = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    return out
