"""The brief an ai attempt receives, built deterministically from the record: the task's
``input`` and the ``results`` of the steps that have run (each step's latest), as every
step gets them.

A loop-back attempt's brief lists every prior attempt of that loop and why each was
rejected (must-fix items, the failing check's output cut to OUTPUT_CUT_CHARS, reason
codes), so attempt N argues with the feedback instead of repeating attempt 1."""

from __future__ import annotations

from typing import Any

from statewright.definition.model import Step
from statewright.machine.state import Outcome, TaskState

OUTPUT_CUT_CHARS = 4000


def cut_output(text: str, limit: int = OUTPUT_CUT_CHARS) -> str:
    """Keep the tail (where failures are reported) and say how much was cut."""
    if len(text) <= limit:
        return text
    return f"[... {len(text) - limit} earlier characters cut ...]\n" + text[-limit:]


def build_brief(
    state: TaskState, step: Step, attempt: int, repair_error: str | None = None
) -> dict[str, Any]:
    index = state.workflow.index_of(step.id)
    earlier: dict[str, Any] = {}
    for s in state.workflow.steps[:index]:
        mine = state.attempts_of(s.id)
        if mine:  # the latest attempt: an advisory failure is shown, not an older pass
            last = mine[-1]
            earlier[s.id] = {
                "attempt": last.number,
                "outcome": last.outcome.value,
                "verdict": dict(last.verdict) if last.verdict is not None else None,
                "artifacts": dict(last.artifacts),
            }
    prior: list[dict[str, Any]] = []
    for lb in state.loop_backs:
        if lb.target == step.id:
            prior.append(
                {
                    "attempt": lb.target_attempt,
                    "rejected_by": lb.failed_step,
                    "rejected_attempt": lb.failed_attempt,
                    "reason": lb.reason,
                    "must_fix": list(lb.must_fix),
                    "output": lb.output,
                }
            )
    for a in state.attempts_of(step.id):
        if a.outcome is not Outcome.PASSED:
            prior.append(
                {
                    "attempt": a.number,
                    "rejected_by": step.id,
                    "rejected_attempt": a.number,
                    "reason": a.reason,
                    "must_fix": list(_must_fix(a.verdict)),
                    "output": cut_output(a.output or a.detail),
                }
            )
    prior.sort(key=lambda p: (p["attempt"], p["rejected_by"]))
    brief: dict[str, Any] = {
        "task_id": state.task_id,
        "workflow": state.workflow.name,
        "workflow_version": state.workflow.version,
        "step": step.id,
        "owner": step.owner,
        "attempt": attempt,
        "instructions": step.instructions,
        "input": dict(state.input),
        "results": {name: dict(value) for name, value in state.results.items()},
        "earlier_steps": earlier,
        "prior_attempts": prior,
        "output_schema": dict(step.output_schema) if step.output_schema is not None else None,
    }
    if state.evidence:  # what people supplied to the task since it started
        brief["evidence"] = [{"actor": e.actor, "evidence": dict(e.evidence), "note": e.note} for e in state.evidence]
    if repair_error is not None:
        brief["repair"] = {
            "error": repair_error,
            "message": "Your previous verdict did not match the schema. Submit it again.",
        }
    return brief


def _must_fix(verdict: Any) -> tuple[str, ...]:
    if isinstance(verdict, dict):
        items = verdict.get("must_fix")
        if isinstance(items, list):
            return tuple(str(i) for i in items)
    return ()
