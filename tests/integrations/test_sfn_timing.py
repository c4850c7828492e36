"""The states a clock reaches on Step Functions: an approval window that closes and a
worker that stops heartbeating. The exported seconds (a day, five minutes) become one
second here, since moto's interpreter waits in real time; nothing else changes."""

from __future__ import annotations

from typing import Any

from statewright.definition import workflow_from_dict
from statewright.machine.state import TaskStatus
from strategies import Driver

from .sfn_harness import StepFunctions, definition


def wait_for_end(aws: StepFunctions, execution: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Take the messages (answering none) until the execution ends."""
    messages = []
    while (body := aws.take(aws.tasks, execution)) is not None:
        messages.append(body)
    return aws.status(execution), messages


def test_an_approval_window_that_closes_fails_the_step_as_approval_expired(aws: StepFunctions) -> None:
    """The human task's TimeoutSeconds is its expires_after; no answer in time fails the step
    with ``approval_expired`` and takes its route, as the reducer's expiry timer does."""
    wf = workflow_from_dict({"workflow": "w", "steps": [
        {"id": "sign", "kind": "human", "owner": "legal", "approvers": {"role": "counsel"}, "expires_after": "1d"},
    ]})
    asl = definition(wf, aws.tasks)
    assert asl["States"]["sign: run"]["TimeoutSeconds"] == 86_400
    asl["States"]["sign: run"]["TimeoutSeconds"] = 1
    end, messages = wait_for_end(aws, aws.start(asl, {}))
    assert [m["kind"] for m in messages] == ["human", "halted"]
    assert (end["status"], end["error"], messages[-1]["step"]) == ("FAILED", "approval_expired", "sign")

    d = Driver(wf)
    d.submit()
    d.fire(advance_ms=86_400_000)
    assert d.state.status is TaskStatus.HALTED and d.state.halt is not None
    assert (d.state.halt.reason, d.state.halt.step) == ("approval_expired", "sign")


def test_a_worker_that_stops_heartbeating_is_replaced_then_the_step_fails_as_worker_died(
        aws: StepFunctions) -> None:
    """A silent worker misses its heartbeat: when the deliveries (the Retry on
    States.HeartbeatTimeout) are spent, the step fails with ``worker_died`` and takes its
    route (here: continue). moto retries a waitForTaskToken task with the outcome of the
    try before (see test_sfn_worker.py), so how often it is delivered is not checked here."""
    wf = workflow_from_dict({"workflow": "w", "steps": [
        {"id": "build", "kind": "code", "owner": "ci", "run": {"command": ["true"]}, "on_failure": "continue",
         "retry": {"max_deliveries": 2}},
        {"id": "ship", "kind": "code", "owner": "ci", "run": {"command": ["true"]}},
    ]})
    asl = definition(wf, aws.tasks)
    asl["States"]["build: run"]["HeartbeatSeconds"] = 1
    execution = aws.start(asl, {})
    delivered = []
    while (body := aws.take(aws.tasks, execution)) is not None:
        delivered.append((body["step"], body["attempt"]))
        if body["step"] == "ship":
            aws.sfn.send_task_success(taskToken=body["task_token"], output="{}")
    end = aws.status(execution)
    assert end["status"] == "SUCCEEDED"
    assert delivered[0] == ("build", 1) and delivered[-1] == ("ship", 1)
    assert asl["States"]["build: run"]["Retry"][1] == {
        "ErrorEquals": ["States.HeartbeatTimeout", "States.Timeout"], "MaxAttempts": 1, "IntervalSeconds": 1,
        "BackoffRate": 1.0}
    assert {"build: worker lost", "build: failed"} <= aws.entered(execution)
