"""The proposal a human step shows: the work of the steps before it, canonicalised.

An approval binds to the sha256 of this exact proposal; any changed attempt before the
step changes the hash and invalidates the approval."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statewright._canonical import sha256_hex

if TYPE_CHECKING:
    from statewright.machine.state import TaskState


def build_proposal(state: TaskState, step_index: int) -> dict[str, Any]:
    """The latest attempt of every step before ``step_index``, with the input.

    The latest attempt, whatever its outcome: an advisory step that failed on this pass
    (``on_failure: continue``) is shown failed, never as an older pass of the same step."""
    steps = []
    for step in state.workflow.steps[:step_index]:
        mine = state.attempts_of(step.id)
        if not mine:
            continue
        last = mine[-1]
        steps.append(
            {
                "step": step.id,
                "attempt": last.number,
                "actor": last.actor,
                "outcome": last.outcome.value,
                "verdict": dict(last.verdict) if last.verdict is not None else None,
                "artifacts": dict(last.artifacts),
            }
        )
    return {
        "task_id": state.task_id,
        "workflow": state.workflow.name,
        "workflow_hash": state.workflow.content_hash,
        "input": dict(state.input),
        "steps": steps,
    }


def proposal_hash(state: TaskState, step_index: int) -> str:
    return sha256_hex(build_proposal(state, step_index))
