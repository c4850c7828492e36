"""A statewright worker for a workflow exported to AWS Step Functions (``export --format asl``).

The cycle it serves: take a message from the queue, find the workflow it names (by content
hash), run the step with the same executors a statewright worker uses (agents, checks, code
steps, verdict schemas with one repair turn, protected paths), heartbeat while it runs, and
answer the task token: SendTaskSuccess with the step's verdict, result or check, or
SendTaskFailure whose error is the reason code (``transient`` for a retryable error, which
the state's Retry handles). Whether an attempt passed, failed or halted is decided by the
task reducer itself (``judge``), so a verdict means on Step Functions what it means here.

A human step's message is not work for a machine: the worker prints it as one JSON line
(who may answer, the proposal's hash and the token) and leaves the answer to a person
(``statewright sfn answer``). A halted task's dead letter is printed the same way.
boto3 is imported lazily (the ``[aws]`` extra)."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statewright._errors import InputError, PermanentError, TransientError
from statewright._names import is_agent_name, person_name_problem
from statewright._record import record
from statewright.definition.model import Step, StepKind, Workflow
from statewright.export.asl import TRANSIENT
from statewright.machine.commands import RunStep
from statewright.machine.events import ArtifactsCaptured, AttemptReported, CheckReported
from statewright.machine.state import Attempt, Current, Outcome, TaskState, TaskStatus
from statewright.machine.task import transition

if TYPE_CHECKING:
    from statewright.integrations.sfn_record import Recorder

log = logging.getLogger("statewright.sfn")
MAX_CAUSE = 32_000  # Step Functions takes at most 32768 characters of cause


@record
class Answer:
    """What the worker sends for one task token."""

    ok: bool
    output: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""
    cause: str = ""


@dataclass
class _Held:
    """The execution's recorded state while the worker performs its step (None: no record)."""

    state: TaskState | None
    execution: str = ""


@record
class Repair:
    """The verdict did not match its schema: one more turn of the agent, with this brief."""

    brief: Mapping[str, Any]
    problem: str


def task_name(body: Mapping[str, Any]) -> str:
    """The execution's name (the last part of its ARN): the task id workspaces use."""
    return str(body.get("task", "task")).rsplit(":", 1)[-1] or "task"


def state_at(wf: Workflow, body: Mapping[str, Any], *, repair_used: bool = False) -> TaskState:
    """The task's state as the message shows it: its input, the steps' results, and the
    step in flight (and the ai attempt whose worktree later steps work in, when known)."""
    step = wf.step(str(body["step"]))
    attempt = int(body.get("attempt", 1))
    task = task_name(body)
    cid = f"{task}/{step.id}/{attempt}"
    attempts: tuple[Attempt, ...] = ()
    space = body.get("workspace")
    if isinstance(space, Mapping) and space.get("path") and space.get("step") in {s.id for s in wf.steps}:
        producer = wf.step(str(space["step"]))
        attempts = (Attempt(step=producer.id, kind=StepKind.AI.value, owner=producer.owner, actor="agent",
                            number=1, outcome=Outcome.PASSED,
                            artifacts={"workspace": str(space["path"]),
                                       "base_commit": str(space.get("base_commit", ""))}),)
    return TaskState(
        task_id=task, workflow=wf, status=TaskStatus.RUNNING, version=1,
        input=dict(body.get("input") or {}), results=present_results(wf, body.get("results")),
        step_index=wf.index_of(step.id), attempts=attempts,
        current=Current(step=step.id, attempt=attempt, started_at_ms=0, command_id=cid,
                        repair_used=repair_used, key=cid),
    )


def present_results(wf: Workflow, results: object) -> dict[str, Any]:
    """The steps' results a message carries, without the nulls that stand for none (a JSON
    path cannot remove a key, so the state machine clears a result to null): a step's own,
    and, inside a map step's result, a child's step's."""
    if not isinstance(results, Mapping):
        return {}
    kinds = {s.id: s.kind for s in wf.steps}
    out: dict[str, Any] = {}
    for name, value in results.items():
        if not isinstance(value, Mapping):
            continue
        if kinds.get(name) is StepKind.MAP and isinstance(value.get("results"), list):
            children = [{k: v for k, v in c.items() if v is not None} if isinstance(c, Mapping) else c
                        for c in value["results"]]
            value = {**value, "results": children}
        out[str(name)] = dict(value)
    return out


def judge(wf: Workflow, body: Mapping[str, Any], report: AttemptReported, *,
          repair_used: bool = False, state: TaskState | None = None) -> Answer | Repair:
    """The answer for an ai or code step's report, as the task reducer judges it: passed
    (with the verdict or result), failed or halted (with the reason code), or a repair turn.
    ``state``: the task's recorded state (default: the state the message shows)."""
    state = state or state_at(wf, body, repair_used=repair_used)
    step = wf.step(str(body["step"]))
    report = AttemptReported(**{**_fields(report), "command_id": state.current.command_id if state.current else ""})
    new, commands = transition(state, report)
    repairs = [c for c in commands if isinstance(c, RunStep) and c.repair_error]
    if repairs:
        return Repair(brief=dict(repairs[0].brief), problem=str(repairs[0].repair_error))
    done = new.attempts[len(state.attempts)]  # its own: a later step may have been entered and ended too
    key = "verdict" if step.kind is StepKind.AI else "result"
    kept = new.results.get(step.id)  # the attempt's own: none when it recorded none
    output: dict[str, Any] = {} if kept is None else {key: dict(kept)}
    if done.outcome is not Outcome.PASSED:
        reason, detail = done.reason or "failed", (done.detail or done.reason)[:MAX_CAUSE]
        if output:  # the state keeps its verdict or result: answered as a success that says it failed
            return Answer(True, {**output, "failure": {"reason": reason, "detail": detail}})
        return Answer(False, error=reason, cause=detail)
    if step.kind is StepKind.AI and "workspace" in done.artifacts:
        output["workspace"] = {"step": step.id, "path": done.artifacts["workspace"],
                               "base_commit": done.artifacts.get("base_commit", "")}
    return Answer(True, output)


def judge_check(body: Mapping[str, Any], report: CheckReported) -> Answer:
    """A wait step's check: the answer carries it; the state machine counts the checks."""
    if report.error is not None:
        return Answer(False, error=report.error, cause=(report.detail or report.error)[:MAX_CAUSE])
    out: dict[str, Any] = {"passed": bool(report.passed), "check": int(body.get("check", 1)),
                           "detail": report.detail}
    return Answer(True, out)


def decision(actor: str, *, approved: bool, reason_code: str = "", codes: Iterable[str] = ()) -> dict[str, Any]:
    """A person's answer to a human step (raises InputError for a bad one)."""
    problem = person_name_problem(actor) if actor else "an answer needs the name of who gives it"
    if problem is None and is_agent_name(actor):
        problem = f"{actor!r} is an agent or system actor and may never approve or reject"
    if problem is not None:
        raise InputError(problem)
    if approved:
        return {"approved": True, "actor": actor}
    allowed = list(codes)
    if not reason_code or (allowed and reason_code not in allowed):
        raise InputError(f"a rejection needs a reason code{': one of ' + ', '.join(allowed) if allowed else ''}")
    return {"approved": False, "actor": actor, "reason_code": reason_code}


def _fields(event: AttemptReported) -> dict[str, Any]:
    from dataclasses import fields

    return {f.name: getattr(event, f.name) for f in fields(event)}


# --- the worker -------------------------------------------------------------------------


class SfnWorker:
    """Takes task tokens from one queue and answers them (see the module docstring)."""

    def __init__(self, workflows: Iterable[Workflow], queue_url: str, *, sqs: Any, sfn: Any,
                 workspace_root: Path, heartbeat_seconds: float = 60.0, wait_seconds: int = 20,
                 echo: Callable[[str], None] = print, now_ms: Callable[[], int] | None = None,
                 recorder: Recorder | None = None) -> None:
        # a map step's child workflow comes with the file that names it
        self.workflows = {w.content_hash: w for wf in workflows for w in (wf, *wf.children.values())}
        self.queue_url = queue_url
        self.sqs = sqs
        self.sfn = sfn
        self.workspace_root = workspace_root
        self.heartbeat_seconds = heartbeat_seconds
        self.wait_seconds = wait_seconds
        self.echo = echo
        self.now_ms = now_ms or (lambda: int(time.time() * 1000))
        self.handled = 0
        self.recorder = recorder
        from statewright.executors._isolation import LOG_FILTER, Redactor, secrets_in

        held = secrets_in(os.environ)  # the worker's own credentials (AWS keys among them)
        self._redactor = Redactor(held)
        LOG_FILTER.know(held)
        log.addFilter(LOG_FILTER)

    def run(self, *, once: bool = False, stop: threading.Event | None = None) -> int:
        """Take and answer messages; with ``once``, stop after the first receive that finds
        any (or none). Returns the number of messages handled."""
        stop = stop or threading.Event()
        while not stop.is_set():
            self.poll()
            if once:
                break
        return self.handled

    def poll(self) -> int:
        found = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=1,
                                         WaitTimeSeconds=self.wait_seconds).get("Messages", [])
        for msg in found:
            self.handle(msg)
        return len(found)

    def handle(self, msg: Mapping[str, Any]) -> None:
        """Answer one message, then delete it (an answered token cannot be answered again)."""
        try:
            body = json.loads(msg["Body"])
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            log.warning("dropped a message that is not a statewright task: %s", exc)
            self._delete(msg)
            return
        kind = body.get("kind")
        if kind in ("halted", "human", "ended"):
            self._record_to(body)
        if kind == "halted":
            self.echo(json.dumps({k: body.get(k) for k in ("kind", "task", "workflow", "step", "reason", "detail")}))
        elif kind == "human":
            shown = ("kind", "task", "workflow", "step", "attempt", "role", "separate_from",
                     "reject_codes", "proposal", "proposal_hash", "task_token")
            self.echo(json.dumps({k: body.get(k) for k in shown}))
        elif kind == "ended":
            pass  # only for the record: the execution succeeded after a person's approval
        else:
            answer = self._answer_for(body)
            self._send(str(body.get("task_token", "")), answer)
        self.handled += 1
        self._delete(msg)

    def answer(self, body: Mapping[str, Any]) -> Answer:
        """The answer to one message, redacted (an Express workflow's Lambda function returns
        it instead of sending it with a token)."""
        got = self._answer_for(body)
        return Answer(got.ok, got.output, got.error, self._redactor.text(got.cause))

    def _answer_for(self, body: Mapping[str, Any]) -> Answer:
        wf = self.workflows.get(str(body.get("workflow_hash", "")))
        if wf is None:
            return Answer(False, error="unknown_workflow",
                          cause=f"this worker does not know workflow {body.get('workflow')!r} at "
                                f"{str(body.get('workflow_hash', ''))[:12]}; start it with that file")
        try:
            step = wf.step(str(body.get("step", "")))
        except KeyError as exc:
            return Answer(False, error="unknown_step", cause=str(exc))
        stop = threading.Event()
        token = str(body.get("task_token", ""))
        beat = threading.Thread(target=self._heartbeat, args=(token, stop), daemon=True)
        if token:  # an Express workflow's Lambda task has none: it answers by returning
            beat.start()
        held = _Held(self.recorder.at(wf, body) if self.recorder is not None else None, str(body.get("task", "")))
        try:
            return self._perform(wf, step, body, held)
        except TransientError as exc:
            name = type(exc).__name__
            error = "non_retryable" if name in step.retry.non_retryable else TRANSIENT
            answer = Answer(False, error=error, cause=f"{name}: {exc}"[:MAX_CAUSE])
            if error != TRANSIENT:  # a failed attempt; a transient one is tried again by the state's Retry
                self._record_failure(held, body, answer)
            return answer
        except PermanentError as exc:
            reason = exc.reason if exc.reason != "error" else "permanent_error"
            answer = Answer(False, error=reason, cause=f"{type(exc).__name__}: {exc}"[:MAX_CAUSE])
            self._record_failure(held, body, answer)
            return answer
        except Exception as exc:  # poison work never stops a worker
            answer = Answer(False, error="executor_error", cause=f"{type(exc).__name__}: {exc}"[:MAX_CAUSE])
            self._record_failure(held, body, answer)
            return answer
        finally:
            stop.set()
            if beat.is_alive():
                beat.join()

    def _perform(self, wf: Workflow, step: Step, body: Mapping[str, Any], held: _Held) -> Answer:
        from statewright.machine.brief import build_brief
        from statewright.runtime import artifacts, perform, screen, workspaces
        from statewright.store.base import Claim

        kind = body.get("kind")
        state = held.state or state_at(wf, body)
        attempt = int(body.get("attempt", 1))
        if kind == "capture":
            cid = state.current.command_id if state.current else ""
            common: dict[str, Any] = {"event_id": f"{cid}:result", "at_ms": self.now_ms(), "command_id": cid,
                                      "step": step.id, "attempt": attempt}
            try:
                found = artifacts.capture(self._work_dir(state, step), step.artifacts, state.input)
            except artifacts.ArtifactError as exc:
                self._record(held, ArtifactsCaptured(**common, error=exc.reason, detail=str(exc)))
                return Answer(False, error=exc.reason, cause=str(exc))
            self._record(held, ArtifactsCaptured(**common, artifacts=found))
            return Answer(True, {"artifacts": found})
        is_check = kind == "check"
        if is_check != (step.kind is StepKind.WAIT) or (not is_check and step.kind not in (StepKind.AI, StepKind.CODE)):
            return Answer(False, error="unknown_step", cause=f"step {step.id!r} is a {step.kind.value} step, "
                                                             f"not one for a {kind!r} message")
        cid = state.current.command_id if state.current else ""
        brief = build_brief(state, step, attempt) if step.kind is StepKind.AI else {}
        repair_used = False
        while True:
            claim = Claim(command_id=cid, task_id=state.task_id, type="RunCheck" if is_check else "RunStep",
                          body={"attempt": attempt, "brief": brief, "idempotency_key": cid,
                                "check_number": int(body.get("check", 1))},
                          token=0, deliveries=1, failures=0, lease_expires_ms=0)
            if step.kind is StepKind.AI:
                space = workspaces.for_ai_attempt(self.workspace_root, state, step, attempt)
            else:
                space = workspaces.for_check(state, step)
            ctx = self._context(state, step, attempt, cid, space.path if space else self._task_dir(state))
            event = perform.run(claim, step, ctx, space, f"{cid}:result", self.now_ms)
            # what leaves for Step Functions is screened and redacted as a report to the store is
            event = self._redactor_for(step).record(screen.screen(event, step.result_limit_bytes))
            if isinstance(event, CheckReported):
                self._record(held, event)
                return judge_check(body, event)
            if not isinstance(event, AttemptReported):
                return Answer(False, error="executor_error", cause=f"unexpected report {event.type}")
            verdict = judge(wf, body, event, repair_used=repair_used, state=held.state)
            self._record(held, event)
            if isinstance(verdict, Answer):
                return verdict
            brief, repair_used = dict(verdict.brief), True
            if held.state is not None and held.state.current is not None:  # the repair turn, recorded
                state, cid = held.state, held.state.current.command_id

    def _context(self, state: TaskState, step: Step, attempt: int, key: str, workspace: Path) -> Any:
        from types import MappingProxyType

        from statewright.executors._isolation import step_env
        from statewright.executors.base import ExecContext

        return ExecContext(
            task_id=state.task_id, step=step.id, attempt=attempt, idempotency_key=key,
            workspace=workspace, timeout_seconds=step.timeout_seconds,
            env=step_env(step.env, step.secrets, os.environ, step=step.id),
            input=MappingProxyType(dict(state.input)),
            results=MappingProxyType({k: MappingProxyType(dict(v)) for k, v in state.results.items()
                                      if isinstance(v, Mapping)}),
        )

    def _redactor_for(self, step: Step) -> Any:
        """The worker's redactor, knowing also the step's declared secrets and API key."""
        names = list(step.secrets)
        key_env = (step.agent or {}).get("api_key_env")
        if isinstance(key_env, str):
            names.append(key_env)
        return self._redactor.with_secrets([os.environ[n] for n in names if n in os.environ])

    def _task_dir(self, state: TaskState) -> Path:
        ws = state.input.get("workspace")
        path = Path(str(ws)) if ws else self.workspace_root / state.task_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _work_dir(self, state: TaskState, step: Step) -> Path:
        from statewright.runtime import workspaces

        space = workspaces.for_check(state, step)
        return space.path if space is not None else self._task_dir(state)

    # --- the record in statewright's store (a Recorder; none: nothing recorded) --------
    def _record_to(self, body: Mapping[str, Any]) -> None:
        """Bring the execution's record up to a message that is not work: a person's
        decision, or how the execution ended (a halt the worker did not record: the step's
        attempt failed with the dead letter's reason)."""
        if self.recorder is None:
            return
        wf = self.workflows.get(str(body.get("workflow_hash", "")))
        if wf is None:
            return
        state = self.recorder.at(wf, body)
        if state is None or body.get("kind") != "halted" or state.terminal:
            return
        cur = state.current
        if cur is None or cur.step != body.get("step") or state.status is not TaskStatus.RUNNING:
            self.recorder.stop(str(body.get("task", "")), f"the execution halted at {body.get('step')!r} with "
                                                          f"{body.get('reason')!r}, which the record did not see")
            return
        self._record_failure(_Held(state, str(body.get("task", ""))), {**body, "attempt": cur.attempt},
                             Answer(False, error=str(body.get("reason") or "failed"), cause=str(body.get("detail"))))

    def _record(self, held: _Held, event: Any) -> None:
        if self.recorder is None or held.state is None:
            return
        try:
            held.state = self.recorder.record(held.state, event)
        except Exception as exc:  # the record ends; the answer to Step Functions stands
            from statewright.runtime.screen import describe

            self.recorder.stop(held.execution, describe(exc))
            held.state = None

    def _record_failure(self, held: _Held, body: Mapping[str, Any], answer: Answer) -> None:
        """A failed attempt as the statewright worker records it: the reason code, and the
        detail redacted."""
        state = held.state
        if state is None or state.current is None:
            return
        cur = state.current
        step = state.workflow.step(cur.step)
        detail = self._redactor.text(answer.cause or answer.error)
        if step.kind is StepKind.WAIT:
            event: Any = CheckReported(event_id=f"{cur.command_id}:result", at_ms=self.now_ms(),
                                       command_id=cur.command_id, step=cur.step, attempt=cur.attempt,
                                       check_number=cur.checks + 1, error=answer.error, detail=detail)
        elif step.kind is StepKind.HUMAN:
            event = ArtifactsCaptured(event_id=f"{cur.command_id}:result", at_ms=self.now_ms(),
                                      command_id=cur.command_id, step=cur.step, attempt=cur.attempt,
                                      error=answer.error, detail=detail)
        else:
            event = AttemptReported(event_id=f"{cur.command_id}:result", at_ms=self.now_ms(),
                                    command_id=cur.command_id, step=cur.step, attempt=cur.attempt,
                                    actor=f"{'agent' if step.kind is StepKind.AI else 'code'}:{step.id}",
                                    ok=False, error=answer.error, detail=detail)
        self._record(held, event)

    def _heartbeat(self, token: str, stop: threading.Event) -> None:
        interval = max(0.05, self.heartbeat_seconds / 3)
        while not stop.wait(interval):
            try:
                self.sfn.send_task_heartbeat(taskToken=token)
            except Exception as exc:  # the token may be gone (timed out, answered); say so, go on
                log.warning("heartbeat refused: %s", exc)
                return

    def _send(self, token: str, answer: Answer) -> None:
        answer = Answer(answer.ok, answer.output, answer.error, self._redactor.text(answer.cause))
        try:
            if answer.ok:
                self.sfn.send_task_success(taskToken=token, output=json.dumps(answer.output))
            else:
                self.sfn.send_task_failure(taskToken=token, error=answer.error[:256],
                                           cause=(answer.cause or answer.error)[:MAX_CAUSE])
        except Exception as exc:  # a token that timed out or was answered: nothing waits for it
            log.warning("the answer for a task token was refused: %s", exc)

    def _delete(self, msg: Mapping[str, Any]) -> None:
        self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=msg["ReceiptHandle"])


def clients(region: str | None = None) -> tuple[Any, Any]:
    """boto3 SQS and Step Functions clients (InputError without the ``[aws]`` extra)."""
    try:
        import boto3
    except ImportError:
        raise InputError("the sfn commands need boto3: pip install 'statewright[aws]'") from None
    return boto3.client("sqs", region_name=region), boto3.client("stepfunctions", region_name=region)

