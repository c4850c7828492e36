"""The ASL export's shape: what a step's message carries, where it is sent, the Retry a
retry policy becomes, and the one-line refusals of what Step Functions cannot run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statewright._errors import InputError
from statewright.cli import cli
from statewright.definition import load_workflow, workflow_from_dict
from statewright.export.asl import SEND_AND_WAIT, Queues, to_asl

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
Q = "https://sqs.eu-west-1.amazonaws.com/123456789012/statewright"


def one(step: dict[str, Any], *more: dict[str, Any]) -> Any:
    return workflow_from_dict({"workflow": "w", "steps": [step, *more]})


def code(sid: str = "c", **fields: Any) -> dict[str, Any]:
    return {"id": sid, "kind": "code", "owner": "team", "run": {"command": ["true"]}, **fields}


def test_every_task_sends_its_message_to_its_owners_queue_and_waits_for_the_token() -> None:
    """Each step's message names the token, task, step, kind, attempt and input; a human
    step's also the proposal and its sha256; an owner's own queue wins over the default."""
    wf = load_workflow(EXAMPLES / "supplier-bank-change.yaml")
    asl = to_asl(wf, Queues(default=Q, by_owner={"finance-controls": Q + "-finance"}))
    tasks = {name: s for name, s in asl["States"].items() if s.get("Resource") == SEND_AND_WAIT}
    assert {name.split(": ")[0] for name in tasks} == {s.id for s in wf.steps}
    for name, state in tasks.items():
        body = state["Parameters"]["MessageBody"]
        assert {"task_token.$", "task.$", "step", "kind", "attempt.$", "input.$"} <= set(body), name
        assert body["task_token.$"] == "$$.Task.Token"
    approve = tasks["approve: run"]
    assert approve["Parameters"]["QueueUrl"] == Q + "-finance"
    assert {"proposal.$", "proposal_hash.$"} <= set(approve["Parameters"]["MessageBody"])
    assert approve["TimeoutSeconds"] == 24 * 3600
    assert tasks["execute: run"]["Parameters"]["QueueUrl"] == Q
    assert asl["States"]["Dead letter"]["Parameters"]["QueueUrl"] == Q


def test_every_outcome_route_is_kept() -> None:
    """supplier-bank-change's suspected_fraud halts, its conflict loops back to prepare, and a
    loop-back's budget is a counter compared in a Choice."""
    asl = to_asl(load_workflow(EXAMPLES / "supplier-bank-change.yaml"), Queues(default=Q))
    states = asl["States"]
    route = states["analyse: failure route"]["Choices"]
    assert {"Variable": "$.error.Error", "StringEquals": "outcome:suspected_fraud", "Next": "analyse: halt"} in route
    assert states["execute: run"]["Catch"] == [
        {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "execute: no result"}]
    assert states["execute: no result"]["Next"] == "execute: caught"
    caught = {c.get("StringEquals"): c["Next"] for c in states["execute: caught"]["Choices"]}
    assert caught["conflict"] == "execute: conflict"
    assert states["execute: conflict budget"]["Choices"] == [
        {"Variable": "$.sw['execute'].fails", "NumericLessThan": 3, "Next": "prepare"}]
    assert "States.MathAdd($.sw['execute'].fails, 1)" in json.dumps(states["execute: conflict"])


def test_a_retry_policy_becomes_the_states_retry() -> None:
    """max_attempts counts the first try; backoff, its cap and jitter carry over; a worker
    that stops heartbeating is delivered again as often as the policy's deliveries allow."""
    wf = one(code(retry={"max_attempts": 5, "initial_backoff": "2s", "max_backoff": "1m", "multiplier": 3,
                         "max_deliveries": 4}))
    retry = to_asl(wf, Queues(default=Q))["States"]["c: run"]["Retry"]
    assert retry[0] == {"ErrorEquals": ["transient"], "MaxAttempts": 4, "IntervalSeconds": 2, "BackoffRate": 3.0,
                        "MaxDelaySeconds": 60, "JitterStrategy": "FULL"}
    assert retry[1]["ErrorEquals"] == ["States.HeartbeatTimeout", "States.Timeout"] and retry[1]["MaxAttempts"] == 3


@pytest.mark.parametrize(("wf", "expected"), [
    (lambda: one(code(retry={"initial_backoff": "500ms"})),
     "step 'c': retry initial_backoff is 0.5s; Step Functions waits whole seconds, at least 1"),
    (lambda: one({"id": "w", "kind": "wait", "owner": "team", "check": {"command": ["true"]}, "every": "1500ms",
                  "max_checks": 2}),
     "step 'w': every 1.5s; Step Functions waits whole seconds"),
    (lambda: one(code("Halted")), "step 'Halted': its id is the name of a state the export adds"),
    (lambda: one({"id": "x" * 64, "kind": "human", "owner": "team", "approvers": {"role": "r"},
                  "proposal": ["input.a"]}),
     "step '" + "x" * 64 + "': its id is too long for Step Functions"),
])
def test_what_step_functions_cannot_run_is_refused_naming_the_step(wf: Any, expected: str) -> None:
    """One line: the step and why."""
    with pytest.raises(InputError) as err:
        to_asl(wf(), Queues(default=Q))
    assert str(err.value).startswith(expected)
    assert "\n" not in str(err.value)


F = "arn:aws:lambda:eu-west-1:123456789012:function:statewright"


@pytest.mark.parametrize(("steps", "line"), [
    ([code(timeout="1m"), {"id": "ok", "kind": "human", "owner": "leads", "approvers": {"role": "lead"}}],
     "step 'ok': a human step waits for a person's answer (a task token), which an Express workflow cannot wait "
     "for; export it as Standard (without --express)"),
    ([code()], "step 'c': its timeout (none) must be at most 300s, the longest an Express execution runs; set "
               "timeout; export it as Standard (without --express)"),
    ([code(timeout="10m")], "step 'c': its timeout (600s) must be at most 300s"),
    ([{"id": "w", "kind": "wait", "owner": "team", "check": {"command": ["true"]}, "every": "1m", "max_checks": 6}],
     "step 'w': its waits (5 of 60s) add up to 300s or more, the longest an Express execution runs"),
])
def test_express_refuses_a_step_it_cannot_carry_naming_it(steps: list[dict[str, Any]], line: str) -> None:
    """An Express workflow cannot wait for a token and runs five minutes at most."""
    with pytest.raises(InputError) as err:
        to_asl(one(*steps), Queues(default=Q), express=True, functions=Queues(default=F))
    assert str(err.value).startswith(line) and "\n" not in str(err.value)


def test_express_runs_machine_steps_as_lambda_tasks_without_tokens() -> None:
    """Each ai, code and wait step's task is the owner's Lambda function, given the message
    without a token and a timeout; Lambda's own errors are retried as transient ones."""
    wf = one(code(timeout="2m"), {"id": "w", "kind": "wait", "owner": "ops", "check": {"command": ["true"]},
                                  "every": "30s", "max_checks": 3, "timeout": "1m"})
    asl = to_asl(wf, Queues(default=Q), express=True, functions=Queues(default=F, by_owner={"ops": F + "-ops"}))
    run, check = asl["States"]["c: run"], asl["States"]["w: run"]
    assert (run["Resource"], check["Resource"]) == (F, F + "-ops")
    assert run["TimeoutSeconds"] == 120 and "HeartbeatSeconds" not in run
    assert "task_token.$" not in run["Parameters"] and run["Parameters"]["kind"] == "code"
    assert "Lambda.TooManyRequestsException" in run["Retry"][0]["ErrorEquals"]
    assert "(Express)" in asl["Comment"]
    assert not any(st.get("Resource", "").endswith(".waitForTaskToken") for st in asl["States"].values())
    with pytest.raises(InputError, match=r"^--express needs --function ARN"):
        to_asl(wf, Queues(default=Q), express=True)
    with pytest.raises(InputError, match=r"^step 'w': no function for owner 'ops'; give --function ARN"):
        to_asl(wf, Queues(default=Q), express=True, functions=Queues(by_owner={"team": F}))


def test_a_missing_queue_is_refused() -> None:
    """An owner needs a queue."""
    wf = one(code())
    with pytest.raises(InputError, match=r"^step 'c': no queue for owner 'team'; give --queue-url URL"):
        to_asl(wf, Queues(by_owner={"other": Q}))


def test_queue_urls_parse_as_a_default_and_owners() -> None:
    queues = Queues.parse([Q, f"team-a={Q}-a"], dead_letter=Q + "-dead")
    assert (queues.default, dict(queues.by_owner), queues.dead_letter) == (Q, {"team-a": Q + "-a"}, Q + "-dead")
    with pytest.raises(InputError, match="a second default queue"):
        Queues.parse([Q, Q])


def test_the_cli_prints_runnable_asl_and_refuses_in_one_line() -> None:
    """``export --format asl`` needs a queue; a refusal is one line on stderr and no output."""
    runner = CliRunner()
    path = str(EXAMPLES / "fix-bug.yaml")
    ok = runner.invoke(cli, ["export", path, "--format", "asl", "--queue-url", Q,
                             "--dead-letter-url", Q + "-dead"])
    assert ok.exit_code == 0
    asl = json.loads(ok.output)
    assert asl["StartAt"] == "Start" and asl["States"]["Dead letter"]["Parameters"]["QueueUrl"] == Q + "-dead"
    for args, message in [
        ([], "error: --format asl needs --queue-url URL"),
        (["--queue-url", Q, "--express", "--function", F], "error: step 'implement': its timeout (600s) must be"),
        (["--queue-url", Q, "--function", F], "error: --function goes with --express"),
        (["--queue-url", "team-platform=" + Q], "error: step 'review': no queue for owner 'team-review'"),
    ]:
        bad = runner.invoke(cli, ["export", path, "--format", "asl", *args])
        assert bad.exit_code == 1
        assert bad.output.startswith(message) and bad.output.count("\n") == 1, bad.output
    mixed = runner.invoke(cli, ["export", path, "--queue-url", Q])
    assert mixed.exit_code == 1 and "go with --format asl" in mixed.output
