"""Express exports on moto's Step Functions interpreter, with a fake of the Lambda runtime
(in this process: the function's return value is the task's result, a raised exception is
its error named by the exception's class, as Lambda's Python runtime reports it). Generated
workflows without human steps run alike on statewright's reducer and as Express state
machines; the real handler (``statewright.integrations.aws_lambda``) runs a workflow's
steps and records the execution in the store."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from statewright.definition import workflow_from_dict
from statewright.definition.model import StepKind, Workflow
from statewright.export.asl import Queues, to_asl
from statewright.integrations import aws_lambda
from statewright.integrations.aws_lambda import failure
from statewright.integrations.aws_sfn import judge, judge_check
from statewright.machine.events import AttemptReported, CheckReported
from statewright.machine.state import TaskStatus
from statewright.runtime.verify import verify_task
from strategies import load_cached

from .sfn_harness import (
    ROLE_ARN,
    Script,
    StepFunctions,
    Terminal,
    Trace,
    answer_of,
    check_error,
    check_passes,
    report_fields,
    run_reducer,
)
from .test_sfn_differential import cases

FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:statewright"
GENERATED = 12
Function = Callable[[dict[str, Any]], Any]


@pytest.fixture
def lambdas(aws: StepFunctions, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Function]]:
    """FunctionName -> the Python function the fake Lambda runtime calls."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

    functions: dict[str, Function] = {}

    def invoke(parameters: Mapping[str, Any], region: str, state_credentials: Any) -> dict[str, Any]:
        event = json.loads(parameters["Payload"])
        try:
            return {"StatusCode": 200, "Payload": functions[parameters["FunctionName"]](event)}
        except Exception as exc:
            return {"StatusCode": 200, "FunctionError": "Unhandled",
                    "Payload": {"errorType": type(exc).__name__, "errorMessage": str(exc)}}

    monkeypatch.setattr(lambda_eval_utils, "_invoke_lambda_function", invoke)
    yield functions


def express(aws: StepFunctions, wf: Workflow, task_input: Mapping[str, Any]) -> str:
    """Start an Express execution of ``wf``'s export (its waits made 0 seconds)."""
    asl = to_asl(wf, Queues(default=aws.tasks), express=True, functions=Queues(default=FUNCTION))
    for state in asl["States"].values():
        if state["Type"] == "Wait":
            state["Seconds"] = 0
    aws.serial += 1
    arn = aws.sfn.create_state_machine(name=f"x{aws.serial}", definition=json.dumps(asl), roleArn=ROLE_ARN,
                                       type="EXPRESS")["stateMachineArn"]
    return str(aws.sfn.start_execution(stateMachineArn=arn, name=f"x-{aws.serial}",
                                       input=json.dumps(task_input))["executionArn"])


def ended(aws: StepFunctions, execution: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while (end := aws.status(execution))["status"] == "RUNNING":
        if time.monotonic() > deadline:
            raise AssertionError(f"{execution} did not end")
        time.sleep(0.02)
    return end


def run_express(aws: StepFunctions, lambdas: dict[str, Function], wf: Workflow,
                script: Script) -> tuple[Trace, Terminal]:
    trace: Trace = []

    def scripted(event: dict[str, Any]) -> Any:
        step = wf.step(event["step"])
        attempt = int(event["attempt"])
        trace.append((step.id, event["kind"], attempt, int(event.get("check", 0))))
        answer = answer_of(script, step.id, attempt)
        if event["kind"] == "check":
            got = judge_check(event, CheckReported(event_id="c", at_ms=0, detail="scripted check",
                                                   passed=check_passes(answer, int(event["check"])),
                                                   error=check_error(answer)))
        else:
            verdict = judge(wf, event, AttemptReported(event_id="r", at_ms=0, step=step.id, attempt=attempt,
                                                       **report_fields(step, answer)))
            if not hasattr(verdict, "ok"):
                raise AssertionError(f"step {step.id}: a scripted answer asked for a repair turn")
            got = verdict
        if got.ok:
            return dict(got.output)
        raise failure(got.error, got.cause or got.error)

    lambdas[FUNCTION] = scripted
    end = ended(aws, express(aws, wf, {}))
    if end["status"] == "SUCCEEDED":
        return trace, (json.loads(end["output"])["outcome"],)
    dead = aws.take(aws.tasks, "", timeout_seconds=5) or {}
    return trace, ("halted", str(end.get("error")), str(dead.get("step")))


@st.composite
def machine_cases(draw: st.DrawFn) -> tuple[Workflow, Script]:
    """A generated case with no human step, every ai and code step given a timeout."""
    wf, script = draw(cases().filter(lambda c: all(s.kind is not StepKind.HUMAN for s in c[0].steps)))
    raw = dict(wf.raw)
    raw["steps"] = [{**s, "timeout": "1m"} if s["kind"] in ("ai", "code") else s for s in raw["steps"]]
    return load_cached(raw, "<generated-express>"), script


def test_generated_workflows_run_alike_as_express_state_machines(
    aws: StepFunctions, lambdas: dict[str, Function],
) -> None:
    """Both engines execute the same steps in the same order and end alike; the number
    compared is printed."""
    compared: list[int] = []

    @settings(max_examples=GENERATED, deadline=None, database=None, derandomize=True,
              phases=[Phase.generate], suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(machine_cases())
    def compare(case: tuple[Workflow, Script]) -> None:
        wf, script = case
        assert run_express(aws, lambdas, wf, script) == run_reducer(wf, script, {})
        compared.append(1)

    compare()
    print(f"compared {len(compared)} generated Express workflows")
    assert len(compared) == GENERATED


STEPS = '''
def draft(brief, ctx):
    return {"verdict": {"approved": True, "summary": "drafted " + brief["input"]["topic"]}}


def publish(ctx):
    if ctx.input["topic"] == "refused":
        return {"ok": False, "output": "the target said no"}
    return {"ok": True, "output": {"url": "https://example.test/" + ctx.input["topic"]}}
'''


@pytest.mark.parametrize("topic", ["sfn", "refused"])
def test_the_lambda_handler_runs_the_steps_and_records_the_execution(
    aws: StepFunctions, lambdas: dict[str, Function], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    store_url: str, open_engine: Any, topic: str,
) -> None:
    """The function's environment names the workflow file and the store: each step runs
    with statewright's executors, a failure is raised as its reason code and halts the
    execution, and the execution is a task in the store that verifies."""
    (tmp_path / "express_steps.py").write_text(STEPS)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "post.yaml"
    path.write_text(json.dumps({"workflow": "post", "steps": [
        {"id": "draft", "kind": "ai", "owner": "writers", "timeout": "1m", "output_schema": "review",
         "agent": {"type": "python", "callable": "express_steps:draft"}},
        {"id": "publish", "kind": "code", "owner": "writers", "timeout": "30s",
         "run": {"callable": "express_steps:publish"}},
    ]}))
    monkeypatch.setattr(aws_lambda, "_workers", {})  # a cold start
    monkeypatch.setenv(aws_lambda.WORKFLOWS_ENV, str(path))
    monkeypatch.setenv(aws_lambda.DB_ENV, store_url)
    monkeypatch.setenv(aws_lambda.ROOT_ENV, str(tmp_path / "ws"))
    lambdas[FUNCTION] = aws_lambda.handler
    wf = workflow_from_dict(json.loads(path.read_text()), str(path))
    end = ended(aws, express(aws, wf, {"topic": topic}))
    engine = open_engine()
    from statewright.integrations.sfn_record import record_key

    tid = engine.store.task_by_key(record_key(end["executionArn"]))
    assert tid is not None
    st_ = engine.state(tid)
    if topic == "sfn":
        assert end["status"] == "SUCCEEDED", end
        assert json.loads(end["output"])["results"]["publish"] == {"url": "https://example.test/sfn"}
        assert st_.status is TaskStatus.COMPLETED
    else:
        assert (end["status"], end.get("error")) == ("FAILED", "failed")
        assert st_.status is TaskStatus.HALTED and st_.halt is not None and st_.halt.step == "publish"
    assert verify_task(engine, tid) == []
