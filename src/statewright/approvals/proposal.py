"""The proposal a human step shows, canonicalised: what its approval binds to.

A step that declares ``proposal:`` shows exactly those parts of the task's state
(``{"fields": {"input.supplier_id": ..., "results.analyse.account": ...}}``); one that does
not shows the input and the latest attempt of every step before it (verdict, result,
artifacts). Declared ``artifacts:`` are shown by content hash (``{"sha256", "bytes"}``; a
``diff`` also names its ``base`` commit): an approval binds to the sha256 of this exact
proposal, so any change to what it shows changes the hash and invalidates the approval.

Raises RefError (``missing_reference``) when a declared reference finds nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from statewright._canonical import sha256_hex
from statewright.machine.paths import parse_ref, resolve

if TYPE_CHECKING:
    from statewright.machine.state import TaskState

#: What of a captured artifact the proposal (and so the hash) holds; its text is shown
#: beside it, and covered by its sha256.
ARTIFACT_FIELDS = ("sha256", "bytes", "base", "head")


def build_proposal(state: TaskState, step_index: int) -> dict[str, Any]:
    step = state.workflow.steps[step_index]
    out: dict[str, Any] = {
        "task_id": state.task_id,
        "workflow": state.workflow.name,
        "workflow_hash": state.workflow.content_hash,
    }
    if step.proposal:
        out["fields"] = {
            ref: resolve(parse_ref(ref), state.input, state.results) for ref in step.proposal
        }
    else:
        out["input"] = dict(state.input)
        out["steps"] = _latest_attempts(state, step_index)
    if step.artifacts:
        out["artifacts"] = artifact_hashes(captured_artifacts(state, step.id))
    if state.evidence:  # evidence supplied later changes the proposal, and so its hash
        out["evidence"] = [
            {"actor": e.actor, "at_ms": e.at_ms, "evidence": e.evidence, "note": e.note} for e in state.evidence
        ]
    return out


def proposal_hash(state: TaskState, step_index: int) -> str:
    return sha256_hex(build_proposal(state, step_index))


def captured_artifacts(state: TaskState, step_id: str) -> Mapping[str, Mapping[str, Any]]:
    """The artifacts the human step ``step_id`` captured for the approval in flight."""
    cur = state.current
    return cur.captured if cur is not None and cur.step == step_id else {}


def artifact_hashes(captured: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        name: {k: entry[k] for k in ARTIFACT_FIELDS if k in entry} for name, entry in captured.items()
    }


def _latest_attempts(state: TaskState, step_index: int) -> list[dict[str, Any]]:
    """The latest attempt of every step before ``step_index``, whatever its outcome: an
    advisory step that failed on this pass (``on_failure: continue``) is shown failed,
    never as an older pass of the same step."""
    steps = []
    for step in state.workflow.steps[:step_index]:
        mine = state.attempts_of(step.id)
        if not mine:
            continue
        last = mine[-1]
        entry = {
            "step": step.id,
            "attempt": last.number,
            "actor": last.actor,
            "outcome": last.outcome.value,
            "verdict": dict(last.verdict) if last.verdict is not None else None,
            "artifacts": dict(last.artifacts),
        }
        if step.id in state.results:
            entry["result"] = state.results[step.id]
        steps.append(entry)
    return steps
