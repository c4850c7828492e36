"""A workflow as Amazon States Language: Task states with Retry and Catch, loop-backs as
Choice states on an attempt counter, human steps as waitForTaskToken tasks."""

from __future__ import annotations

from typing import Any

from statewright.definition.model import RouteKind, StepKind, Workflow


def _name(step_id: str) -> str:
    return step_id


def to_asl(wf: Workflow) -> dict[str, Any]:
    states: dict[str, Any] = {}
    steps = wf.steps
    for i, s in enumerate(steps):
        following = _name(steps[i + 1].id) if i + 1 < len(steps) else "Done"
        nxt = "Done" if s.on_success.kind is RouteKind.COMPLETE else following
        state: dict[str, Any] = {"Type": "Task", "Comment": f"{s.kind.value} step owned by {s.owner}"}
        if s.kind is StepKind.HUMAN:
            state["Resource"] = "arn:aws:states:::lambda:invoke.waitForTaskToken"
            state["Parameters"] = {"role": s.approvers_role, "separate_from": list(s.separate_from),
                                   "TaskToken.$": "$$.Task.Token"}
            if s.expires_after_seconds is not None:
                state["TimeoutSeconds"] = int(s.expires_after_seconds)
        else:
            state["Resource"] = f"arn:aws:states:::statewright:{s.kind.value}"
            state["Parameters"] = {"step": s.id}
            if s.timeout_seconds is not None:
                state["TimeoutSeconds"] = int(s.timeout_seconds)
        if s.kind is not StepKind.HUMAN:
            state["Retry"] = [{
                "ErrorEquals": ["States.Timeout", "Transient"],
                "MaxAttempts": max(0, s.retry.max_attempts - 1),
                "IntervalSeconds": max(1, int(s.retry.initial_backoff_seconds)),
                "BackoffRate": s.retry.multiplier,
                "MaxDelaySeconds": int(s.retry.max_backoff_seconds),
                "JitterStrategy": "FULL" if s.retry.jitter else "NONE",
            }]
        r = s.on_failure
        if r.kind is RouteKind.LOOP_BACK and r.target is not None:
            choice = f"{s.id}: attempts left?"
            state["Catch"] = [{"ErrorEquals": ["States.ALL"], "Next": choice, "ResultPath": "$.error"}]
            states[choice] = {
                "Type": "Choice",
                "Choices": [{"Variable": f"$.attempts.{s.id}", "NumericLessThan": r.max_attempts,
                             "Next": _name(r.target)}],
                "Default": "Halted",
            }
        elif r.kind is RouteKind.CONTINUE:
            state["Catch"] = [{"ErrorEquals": ["States.ALL"], "Next": following, "ResultPath": "$.error"}]
        else:
            state["Catch"] = [{"ErrorEquals": ["States.ALL"], "Next": "Halted", "ResultPath": "$.error"}]
        state["Next"] = nxt
        states[_name(s.id)] = state
    states["Done"] = {"Type": "Succeed"}
    states["Halted"] = {"Type": "Fail", "Error": "Halted", "Cause": "a step failed; see the operator queue"}
    return {
        "Comment": f"{wf.name} v{wf.version} ({wf.content_hash[:12]}), exported by statewright",
        "StartAt": _name(steps[0].id),
        "States": states,
    }
