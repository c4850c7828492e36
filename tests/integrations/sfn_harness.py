"""Run one workflow twice on the same scripted outcomes: on statewright's task reducer
(``Driver``) and as its exported state machine on moto's Step Functions interpreter, with
SQS carrying the task tokens. Each side yields the steps it executed, in order, as
``(step, kind, attempt, check)``, and its terminal outcome: ``("completed",)``,
``("completed_early",)`` or ``("halted", reason, step)``.

A script maps a step to its answers, one per attempt (the last one repeats):

    ai, code   pass | fail | reject (an ai step's ``approved: false``) | outcome-fail |
               outcome-halt (a verdict outcome mapped to fail or halt) | conflict |
               void (an approval before the step no longer holds) | fail-bare (a
               failure that leaves no verdict or result) | bare (a pass with no result:
               a code step, an ai step without an output_schema)
    wait       "K" (K failing checks, then one that passes) | exhaust | error | void
    human      approve | reject

On the Step Functions side the answers go through the sfn worker's own judging
(``aws_sfn.judge``), so a verdict is turned into success or a reason code there, not here."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from statewright.definition.model import OutcomeRoute, Step, StepKind, Workflow
from statewright.export.asl import Queues, to_asl
from statewright.integrations.aws_sfn import decision, judge, judge_check, present_results
from statewright.machine.commands import (
    CancelChild,
    CaptureArtifacts,
    RequestApproval,
    RunCheck,
    RunStep,
    StartChild,
    StartTimer,
    TellParent,
)
from statewright.machine.events import ArtifactsCaptured, AttemptReported, CheckReported, ChildEnded
from statewright.machine.state import TaskStatus
from strategies import Driver

Script = Mapping[str, tuple[str, ...]]
Trace = list[tuple[str, str, int, int]]
Terminal = tuple[str, ...]
ARTIFACT = {"sha256": "0" * 64, "bytes": 4, "text": "diff", "base": "b" * 40, "head": "c" * 40}
REJECT_CODE = "policy_denial"
ROLE_ARN = "arn:aws:iam::123456789012:role/statewright"


def sample(schema: Mapping[str, Any] | None) -> Any:
    """A value that the schema accepts, built from its required properties' types."""
    if not schema:
        return None
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        return {k: sample(props.get(k) or {"type": "string"}) for k in schema.get("required", [])}
    return {"string": "x", "integer": 1, "number": 1, "boolean": True, "array": []}.get(str(kind), "x")


def _outcome(step: Step, route: OutcomeRoute) -> str:
    return next(k for k, v in step.outcomes.items() if v is route)


def report_fields(step: Step, answer: str) -> dict[str, Any]:
    """The AttemptReported fields of a scripted answer of an ai or code step."""
    actor = f"agent:{step.id}" if step.kind is StepKind.AI else f"code:{step.id}"
    if answer == "fail":  # what it left is kept: a command's output, an agent's verdict
        kept = sample(step.output_schema)
        out = {"result": {"exit": 1}} if step.kind is StepKind.CODE else {"verdict": kept} if kept else {}
        return {"actor": actor, "ok": False, "error": "exit_status", "detail": "scripted failure", **out}
    if answer == "fail-bare":
        return {"actor": actor, "ok": False, "error": "exit_status", "detail": "scripted failure"}
    if answer == "bare":
        return {"actor": actor, "ok": True}
    if answer == "void":
        return {"actor": actor, "ok": False, "error": "approval_revoked", "detail": "the approver lost the role"}
    if answer == "conflict":
        return {"actor": actor, "ok": False, "error": "conflict", "detail": "the record changed"}
    value = sample(step.output_schema)
    if value is None and step.kind is StepKind.AI:  # without a schema a verdict is optional, and kept
        value = {"summary": "scripted"}
    if isinstance(value, dict) and answer == "reject":
        value["approved"] = False
    if isinstance(value, dict) and step.outcomes:
        route = {"outcome-fail": OutcomeRoute.FAIL, "outcome-halt": OutcomeRoute.HALT}.get(answer, OutcomeRoute.PASS)
        value["outcome"] = _outcome(step, route)
    if step.kind is StepKind.AI:  # an attempt in its own worktree, which later steps work in
        return {"actor": actor, "ok": True, "verdict": value,
                "artifacts": {"workspace": f"/work/{step.id}", "base_commit": "b" * 40}}
    return {"actor": actor, "ok": True, "result": value if value is not None else {"exit": 0}}


def check_error(answer: str) -> str | None:
    """The reason code a check reports instead of passing or failing, if any."""
    return {"error": "missing_reference", "void": "approval_revoked"}.get(answer)


def check_passes(answer: str, check: int) -> bool:
    """Whether check number ``check`` passes."""
    if check_error(answer) is not None:
        return False
    return answer != "exhaust" and check > int(answer)


def answer_of(script: Script, step: str, attempt: int) -> str:
    mine = script[step]
    return mine[min(attempt, len(mine)) - 1]


# --- statewright --------------------------------------------------------------------------


def child_script(script: Script, map_step: str, index: int, child: Workflow) -> Script:
    """A map step's child's answers: ``script["MAP#INDEX:STEP"]``, else ``script["MAP:STEP"]``,
    else passing."""
    return {s.id: script.get(f"{map_step}#{index}:{s.id}") or script.get(f"{map_step}:{s.id}") or (passing_answer(s),)
            for s in child.steps}


def passing_answer(step: Step) -> str:
    return {StepKind.HUMAN: "approve", StepKind.WAIT: "0"}.get(step.kind, "pass")


def reducer_results(wf: Workflow, script: Script, task_input: Mapping[str, Any]) -> dict[str, Any]:
    """The steps' results at the end of the reducer's run, but a map step's (Step Functions
    gathers only its children's results)."""
    _, state = _reduce(wf, script, task_input)
    return {k: dict(v) for k, v in state.results.items() if wf.step(k).kind is not StepKind.MAP}


def sfn_results(aws: StepFunctions, wf: Workflow, execution: str) -> dict[str, Any] | None:
    """The steps' results a succeeded execution ends with (null: none), as the sfn worker
    reads them, but a map step's; None when it did not succeed."""
    end = aws.status(execution)
    if end["status"] != "SUCCEEDED":
        return None
    found = present_results(wf, json.loads(end["output"])["results"])
    return {k: v for k, v in found.items() if wf.step(k).kind is not StepKind.MAP}


def run_reducer(wf: Workflow, script: Script, task_input: Mapping[str, Any]) -> tuple[Trace, Terminal]:
    trace, state = _reduce(wf, script, task_input)
    if state.status is TaskStatus.HALTED and state.halt is not None:
        return trace, ("halted", state.halt.reason, state.halt.step)
    return trace, (state.status.value,)


def _reduce(wf: Workflow, script: Script, task_input: Mapping[str, Any], task_id: str = "t1") -> tuple[Trace, Any]:
    """The trace and the final state. A map step's children run one after the other in item
    order, each to its end (the trace: a ``(STEP, "map", ATTEMPT, 0)`` mark, then each child's
    entries as ``STEP#INDEX/CHILD_STEP``)."""
    d = Driver(wf, task_id)
    trace: Trace = []
    commands = d.submit(task_input)
    pending: list[StartChild] = []
    marked: set[tuple[str, int]] = set()
    for _ in range(2000):
        if d.state.terminal:
            break
        cmds = [c for c in commands if not isinstance(c, TellParent | CancelChild)]
        pending += [c for c in cmds if isinstance(c, StartChild)]
        others = [c for c in cmds if not isinstance(c, StartChild)]
        cur = d.state.current
        pending = [p for p in pending if cur is not None and (p.step, p.attempt) == (cur.step, cur.attempt)]
        if not others and pending:
            start = pending.pop(0)
            if (start.step, start.attempt) not in marked:
                marked.add((start.step, start.attempt))
                trace.append((start.step, "map", start.attempt, 0))
            child = wf.children[start.workflow_hash]
            sub, end = _reduce(child, child_script(script, start.step, start.index, child), start.input,
                               start.child_id)
            trace += [(f"{start.step}#{start.index}/{st_}", k, a, c) for st_, k, a, c in sub]
            commands = d.apply(d.make(
                ChildEnded, child_id=start.child_id, step=start.step, attempt=start.attempt, index=start.index,
                status=end.status.value, reason=end.halt.reason if end.halt is not None else "",
                result=dict(end.results)))
            continue
        cmd = next(c for c in others if not isinstance(c, StartTimer) or c.purpose == "wait_check")
        step = wf.step(cmd.step)
        answer = answer_of(script, step.id, cmd.attempt)
        if isinstance(cmd, RunStep):
            trace.append((step.id, step.kind.value, cmd.attempt, 0))
            commands = d.report(**report_fields(step, answer))
        elif isinstance(cmd, RunCheck):
            trace.append((step.id, "check", cmd.attempt, cmd.check_number))
            error = check_error(answer)
            commands = d.check(check_passes(answer, cmd.check_number), detail="scripted check",
                               **({"error": error} if error else {}))
        elif isinstance(cmd, StartTimer):
            commands = d.fire()
        elif isinstance(cmd, CaptureArtifacts):
            trace.append((step.id, "capture", cmd.attempt, 0))
            commands = d.apply(d.make(ArtifactsCaptured, command_id=cmd.command_id, step=step.id,
                                      attempt=cmd.attempt, artifacts={n: dict(ARTIFACT) for n in step.artifacts}))
        elif isinstance(cmd, RequestApproval):
            trace.append((step.id, "human", cmd.attempt, 0))
            who = f"approver-{wf.index_of(step.id)}"
            roles = (step.approvers_role,) if step.approvers_role else ()
            commands = d.grant(who, roles) if answer == "approve" else d.reject(who, roles, REJECT_CODE)
        else:
            raise AssertionError(f"unexpected command {cmd!r}")
    return trace, d.state


# --- Step Functions ---------------------------------------------------------------------


def definition(wf: Workflow, queue_url: str) -> dict[str, Any]:
    """The exported definition, with every Wait state's seconds set to 0 (the interpreter
    waits in real time, and a test cannot wait minutes between checks) and no
    HeartbeatSeconds: moto sets a task's heartbeat up after it has sent the message, and an
    answer that comes before that is lost (the task then waits for its heartbeat timeout).
    test_sfn_timing.py checks the heartbeat without answering."""
    asl = to_asl(wf, Queues(default=queue_url))
    for state in asl["States"].values():
        if state["Type"] == "Wait":
            state["Seconds"] = 0
        state.pop("HeartbeatSeconds", None)
    return asl


class StepFunctions:
    """moto's SQS and Step Functions clients, inside a ``mock_aws`` the caller holds."""

    def __init__(self) -> None:
        import boto3

        self.sqs = boto3.client("sqs", region_name="us-east-1")
        self.sfn = boto3.client("stepfunctions", region_name="us-east-1")
        self.serial = 0
        self.machines: dict[str, str] = {}
        self.tasks = self.queue()  # one queue for every run: each run ends before the next

    def start(self, asl: Mapping[str, Any], task_input: Mapping[str, Any]) -> str:
        """Start an execution of ``asl`` (a state machine made once per definition)."""
        text = json.dumps(asl, sort_keys=True)
        if text not in self.machines:
            self.machines[text] = self.sfn.create_state_machine(
                name=f"m{len(self.machines)}", definition=text, roleArn=ROLE_ARN)["stateMachineArn"]
        self.serial += 1
        return str(self.sfn.start_execution(stateMachineArn=self.machines[text], name=f"task-{self.serial}",
                                            input=json.dumps(task_input))["executionArn"])

    def entered(self, execution: str) -> set[str]:
        """The states the execution entered, from its history."""
        events = self.sfn.get_execution_history(executionArn=execution, maxResults=1000)["events"]
        return {e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e}

    def queue(self) -> str:
        self.serial += 1
        return str(self.sqs.create_queue(QueueName=f"q{self.serial}")["QueueUrl"])

    def _receive(self, queue_url: str) -> dict[str, Any] | None:
        found = self.sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1).get("Messages", [])
        if not found:
            return None
        self.sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=found[0]["ReceiptHandle"])
        return dict(json.loads(found[0]["Body"]))

    def status(self, execution: str) -> dict[str, Any]:
        return dict(self.sfn.describe_execution(executionArn=execution))

    def take(self, queue_url: str, execution: str, timeout_seconds: float = 20.0) -> dict[str, Any] | None:
        """The next message on the queue, or None once the execution has ended."""
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            body = self._receive(queue_url)
            if body is not None:
                return body
            if self.status(execution)["status"] != "RUNNING":  # what it sent before it ended is there now
                return self._receive(queue_url)
            time.sleep(0.02)  # a tighter poll holds moto's locks from the threads of a Map run, which then stall
        events = self.sfn.get_execution_history(executionArn=execution, maxResults=1000)["events"]
        last = [json.dumps(e, default=str)[:300] for e in events[-4:]]
        raise AssertionError(f"{execution}: no message and no end within {timeout_seconds}s; last events: {last}")


def run_sfn(aws: StepFunctions, wf: Workflow, script: Script, task_input: Mapping[str, Any],
            asl: Mapping[str, Any] | None = None) -> tuple[Trace, Terminal, str]:
    """The run on Step Functions, and its execution's ARN."""
    queue = aws.tasks
    execution = aws.start(asl or definition(wf, queue), task_input)
    trace: Trace = []
    dead: dict[str, Any] = {}
    children: dict[tuple[str, int], dict[int, Trace]] = {}  # (map step, attempt) -> index -> its trace

    def flush() -> None:  # a map step's children, in item order, once the parent goes on
        for (map_step, map_attempt), by_index in children.items():
            trace.append((map_step, "map", map_attempt, 0))
            for index in sorted(by_index):
                trace.extend(by_index[index])
        children.clear()

    while (body := aws.take(queue, execution)) is not None:
        # the execution, or a map step's child: "EXECUTION/MAP/ATTEMPT/INDEX" (EXECUTION may be a
        # Distributed Map's child execution, whose ARN holds a "/" of its own)
        where = str(body.get("task", "")).rsplit("/", 3) if str(body.get("task", "")) != execution else [""]
        this, script_of = wf, script
        if len(where) == 4:
            map_step, map_attempt, index = where[1], int(where[2]), int(where[3])
            this = wf.children[wf.step(map_step).map.workflow_hash]  # type: ignore[union-attr]
            script_of = child_script(script, map_step, index, this)
        elif len(where) != 1:
            raise AssertionError(f"a message for an unknown task {body.get('task')!r}")
        if body.get("kind") == "halted":
            if this is wf:
                dead = body
            continue
        if body.get("kind") == "ended":  # for a worker that records the execution; no answer
            continue
        step = this.step(body["step"])
        attempt = int(body["attempt"])
        entry = (step.id, body["kind"], attempt, int(body.get("check", 0)))
        if this is wf:
            flush()
            trace.append(entry)
        else:
            children.setdefault((map_step, map_attempt), {}).setdefault(index, []).append(
                (f"{map_step}#{index}/{step.id}", *entry[1:]))
        answer = answer_of(script_of, step.id, attempt)
        token = body["task_token"]
        if body["kind"] == "capture":
            aws.sfn.send_task_success(taskToken=token, output=json.dumps(
                {"artifacts": {n: dict(ARTIFACT) for n in step.artifacts}}))
            continue
        if body["kind"] == "human":
            who = f"approver-{this.index_of(step.id)}"
            out = decision(who, approved=True) if answer == "approve" else decision(
                who, approved=False, reason_code=REJECT_CODE)
            aws.sfn.send_task_success(taskToken=token, output=json.dumps(out))
            continue
        if body["kind"] == "check":
            result = judge_check(body, CheckReported(event_id="c", at_ms=0, detail="scripted check",
                                                     passed=check_passes(answer, int(body["check"])),
                                                     error=check_error(answer)))
        else:
            verdict = judge(this, body, AttemptReported(event_id="r", at_ms=0, step=step.id, attempt=attempt,
                                                      **report_fields(step, answer)))
            if not hasattr(verdict, "ok"):
                raise AssertionError(f"step {step.id}: a scripted answer asked for a repair turn: {verdict!r}")
            result = verdict
        if result.ok:
            aws.sfn.send_task_success(taskToken=token, output=json.dumps(result.output))
        else:
            aws.sfn.send_task_failure(taskToken=token, error=result.error, cause=result.cause or result.error)
    flush()
    end = aws.status(execution)
    if end["status"] == "SUCCEEDED":
        return trace, (json.loads(end["output"])["outcome"],), execution
    if end["status"] == "FAILED":
        return trace, ("halted", str(end.get("error")), str(dead.get("step"))), execution
    raise AssertionError(f"{execution} ended {end['status']}: {end.get('error')} {end.get('cause')}")
