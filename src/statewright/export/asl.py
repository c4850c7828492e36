"""A workflow as Amazon States Language that runs on AWS Step Functions as it is.

Every step becomes a few states around one ``sqs:sendMessage.waitForTaskToken`` task: the
message (JSON) carries ``task_token``, ``task``, ``step``, ``kind``, ``attempt``, ``input``
and ``results``; a statewright sfn worker (or, for a human step, whoever answers for the
approvers) takes it from the queue and answers with the token:

    ai        SendTaskSuccess {"verdict": {...}} (or {}), SendTaskFailure error=REASON
    code      SendTaskSuccess {"result": {...}} (or {}),  SendTaskFailure error=REASON
              a failed attempt whose verdict or result statewright keeps (an outcome mapped
              to fail, ``approved: false``, a command's output): SendTaskSuccess
              {"verdict" or "result": {...}, "failure": {"reason": REASON, "detail": TEXT}}
    check     SendTaskSuccess {"passed": bool, "check": N, "detail": "..."}  (a wait step)
    capture   SendTaskSuccess {"artifacts": {...}}  (a human step's declared artifacts)
    human     SendTaskSuccess {"approved": bool, "actor": NAME, "reason_code": CODE}

The execution's state is ``{"input", "results", "sw", ...}``: ``results.STEP`` is a step's
latest verdict, result or last check, as in statewright's own task state, and null when its
latest attempt recorded none (every way out of such an attempt clears it; a worker reads
null as no result); ``sw.STEP`` holds
the step's counters (attempts, failed attempts, checks), kept with ``States.MathAdd``.
Reason codes route as the reducer routes them: a transient error (``transient``) is retried
by the state's Retry (the step's retry policy) and then fails as ``retries_exhausted``; an
outcome mapped to ``halt``, ``approval_revoked`` and ``artifact_changed`` halt at once;
``conflict`` takes ``on_conflict``; anything else takes ``on_failure``. A loop-back counts
the step's failed attempts against ``max_attempts`` and halts when they are spent. A halt
sends a dead-letter message (``task``, ``step``, ``reason``) and ends in a Fail state whose
error is the reason; a success ends in ``Completed`` or, on a ``complete`` route before the
last step, ``Completed early``.

``express``: an Express workflow (``to_asl``), whose steps run as Lambda tasks that answer
at once: it carries ai, code and wait steps that fit in five minutes, never a human step.

What Step Functions cannot express is refused with one line naming the step and why."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import Any

from statewright._errors import InputError
from statewright._record import record
from statewright.definition.model import OutcomeRoute, Route, RouteKind, Step, StepKind, Workflow
from statewright.machine.paths import parse_ref

SEND = "arn:aws:states:::sqs:sendMessage"
SEND_AND_WAIT = "arn:aws:states:::sqs:sendMessage.waitForTaskToken"
DONE, DONE_EARLY, DEAD_LETTER, HALTED = "Completed", "Completed early", "Dead letter", "Halted"
TRANSIENT = "transient"  # the error a worker answers for a retryable failure
HALT_AT_ONCE = ("approval_revoked", "artifact_changed")  # the reducer halts on these, whatever the route
# A worker that stopped heartbeating (its task has no TimeoutSeconds, so a timeout is that too)
SILENT = ("States.HeartbeatTimeout", "States.Timeout")
HEARTBEAT_SECONDS = 300  # a worker heartbeats well inside this; silence means it died
MAX_STATE_NAME = 80  # Step Functions' limit on a state's name
EXPRESS_SECONDS = 300  # the longest an Express execution runs
# Lambda's own errors worth another try: the step's retry policy retries them as transient
LAMBDA_TRANSIENT = ("Lambda.ServiceException", "Lambda.AWSLambdaException", "Lambda.SdkClientException",
                    "Lambda.TooManyRequestsException")


@record
class Queues:
    """Where each step's messages go: one queue for all, or one per owner; and where a
    halted task's dead letter goes (default: the default queue)."""

    default: str = ""
    by_owner: Mapping[str, str] = field(default_factory=dict)
    dead_letter: str = ""

    @classmethod
    def parse(cls, values: Iterable[str], dead_letter: str = "") -> Queues:
        """From ``--queue-url`` values: ``URL`` (the default) or ``OWNER=URL``."""
        default, by_owner = "", {}
        for value in values:
            owner, sep, url = value.partition("=")
            if sep and not owner.startswith(("https:", "http:")):
                if not url:
                    raise InputError(f"--queue-url {value!r}: give OWNER=URL with a URL")
                by_owner[owner] = url
            elif default:
                raise InputError(f"--queue-url {value!r}: a second default queue; use OWNER=URL for an owner's own")
            else:
                default = value
        return cls(default=default, by_owner=by_owner, dead_letter=dead_letter)

    def of(self, step: Step, option: str = "--queue-url") -> str:
        url = self.by_owner.get(step.owner) or self.default
        if not url:
            what, value = ("queue", "URL") if option == "--queue-url" else ("function", "ARN")
            msg = (f"step {step.id!r}: no {what} for owner {step.owner!r}; "
                   f"give {option} {value} or {option} {step.owner}={value}")
            raise InputError(msg)
        return url

    def dead_letters(self) -> str:
        url = self.dead_letter or self.default
        if not url:
            raise InputError("no queue for dead letters; give --queue-url URL or --dead-letter-url URL")
        return url


def to_asl(wf: Workflow, queues: Queues, *, express: bool = False, functions: Queues | None = None,
           heartbeat_seconds: int = HEARTBEAT_SECONDS) -> dict[str, Any]:
    """The state machine definition of ``wf`` (raises InputError for what cannot run there).

    ``express``: an Express workflow. It cannot wait for a task token and runs at most five
    minutes, so it carries only machine steps that answer at once: each ai, code or wait
    step's work is a Lambda task on ``functions`` (one function for all, or one per owner)
    running ``statewright.integrations.aws_lambda.handler``, which answers as the sfn worker
    does (its return value, or an error named by the reason code). A human step, a step
    whose timeout is past five minutes (or has none), and a wait step whose waits add up
    to five minutes or more are refused, each in one line naming the step."""
    if express:
        _express_problem(wf)
        if functions is None or not (functions.default or functions.by_owner):
            raise InputError("--express needs --function ARN (the Lambda function that runs the steps), "
                             "or --function OWNER=ARN per owner")
    return _Builder(wf, queues, heartbeat_seconds, functions if express else None).build()


def _express_problem(wf: Workflow) -> None:
    """InputError naming the first step an Express workflow cannot carry."""
    for s in wf.steps:
        why = ""
        if s.kind is StepKind.HUMAN:
            why = ("a human step waits for a person's answer (a task token), which an Express workflow cannot "
                   "wait for")
        elif s.kind in (StepKind.AI, StepKind.CODE) and (s.timeout_seconds is None or
                                                           s.timeout_seconds > EXPRESS_SECONDS):
            shown = "none" if s.timeout_seconds is None else f"{s.timeout_seconds:g}s"
            why = (f"its timeout ({shown}) must be at most {EXPRESS_SECONDS}s, the longest an Express "
                   "execution runs; set timeout")
        elif s.kind is StepKind.WAIT and s.every_seconds * max(0, s.max_checks - 1) >= EXPRESS_SECONDS:
            why = (f"its waits ({s.max_checks - 1} of {s.every_seconds:g}s) add up to {EXPRESS_SECONDS}s or more, "
                   "the longest an Express execution runs")
        if why:
            raise InputError(f"step {s.id!r}: {why}; export it as Standard (without --express)")


def jsonpath(ref: str) -> str:
    """The JSONPath of a reference (``results.analyse.summary`` -> ``$.results['analyse']['summary']``)."""
    r = parse_ref(ref)
    return f"$.{r.root}" + "".join(f"[{p}]" if p.isdigit() else f"['{p}']" for p in r.parts)


def _missing(refs: Iterable[str], nxt: str) -> list[dict[str, Any]]:
    """Choice rules that go to ``nxt`` when a reference finds nothing: its path is not there,
    or it names a step's whole result and that is null (no result: ``_Builder._no_result``).
    The null test is a rule of its own, after every path was found present."""
    refs = list(refs)
    gone: list[dict[str, Any]] = [{"Not": {"Variable": jsonpath(r), "IsPresent": True}} for r in refs]
    rules: list[dict[str, Any]] = [{"Or": gone, "Next": nxt} if len(gone) > 1 else {**gone[0], "Next": nxt}]
    for r in refs:
        ref = parse_ref(r)
        if ref.root == "results" and len(ref.parts) == 1:
            rules.append({"Variable": jsonpath(r), "IsNull": True, "Next": nxt})
    return rules


def _targets(state: Mapping[str, Any]) -> set[str]:
    """The states ``state`` may go to next."""
    found = {state.get("Next"), state.get("Default")}
    found |= {c["Next"] for c in (*state.get("Choices", ()), *state.get("Catch", ()))}
    return {t for t in found if t}


def _counter(step_id: str, name: str) -> str:
    return f"$.sw['{step_id}'].{name}"


class _Builder:
    def __init__(self, wf: Workflow, queues: Queues, heartbeat_seconds: int, functions: Queues | None,
                 task: str = "$$.Execution.Id", child: bool = False) -> None:
        self.wf = wf
        self.queues = queues
        self.heartbeat_seconds = heartbeat_seconds
        self.functions = functions  # an Express workflow's Lambda functions; None: Standard, with tokens
        self.task = task  # what a message names the task by: the execution, or a map item's child in it
        self.child = child  # a map step's child workflow, run inside the parent's Map state
        self.states: dict[str, Any] = {}

    def build(self) -> dict[str, Any]:
        wf = self.wf
        reserved = {"Start", DONE, DONE_EARLY, "Succeeded", DEAD_LETTER, HALTED}
        for s in wf.steps:
            if s.id in reserved:
                msg = (f"step {s.id!r}: its id is the name of a state the export adds "
                       f"({', '.join(sorted(reserved))}); rename the step")
                raise InputError(msg)
        self.states["Start"] = {
            "Type": "Pass",
            "Comment": "the task's state: its input, the steps' results, the steps' counters",
            "Parameters": {
                # a map step's child: its input is the item and its index; the parent's attempt names it
                **({"input": {"item.$": "$.item", "index.$": "$.index"}, "map_attempt.$": "$.map_attempt"}
                   if self.child else {"input.$": "$"}),
                "results": {}, "workspace": {}, "decisions": {},
                "sw": {s.id: {"attempts": 0, "fails": 0, "checks": 0} for s in wf.steps},
            },
            "Next": wf.steps[0].id,
        }
        for i, s in enumerate(wf.steps):
            self._step(i, s)
        self._ends()
        for name in self.states:
            if len(name) > MAX_STATE_NAME:
                sid = name.split(": ", 1)[0]
                msg = (f"step {sid!r}: its id is too long for Step Functions, whose state names "
                       f"({name!r}) may have at most {MAX_STATE_NAME} characters; shorten it to "
                       f"{MAX_STATE_NAME - (len(name) - len(sid))} or fewer")
                raise InputError(msg)
        kind = "Express" if self.functions is not None else "Standard"
        return {
            "Comment": f"{wf.name} v{wf.version} ({wf.content_hash[:12]}), exported by statewright ({kind})",
            "StartAt": "Start",
            "States": self.states,
        }

    # --- routes ---------------------------------------------------------------------------
    def _following(self, i: int) -> str:
        return self.wf.steps[i + 1].id if i + 1 < len(self.wf.steps) else DONE

    def _on_success(self, i: int, s: Step) -> str:
        if s.on_success.kind is RouteKind.COMPLETE:
            return DONE if i == len(self.wf.steps) - 1 else DONE_EARLY
        return self._following(i)

    def _failure(self, i: int, s: Step, name: str, route: Route, budget: str) -> None:
        """``name``: count the failed attempt, then take ``route`` (its error is at $.error)."""
        count = {"Type": "Pass", "Parameters": {
            "attempts.$": _counter(s.id, "attempts"), "checks.$": _counter(s.id, "checks"),
            "fails.$": f"States.MathAdd({_counter(s.id, 'fails')}, 1)",
        }, "ResultPath": f"$.sw['{s.id}']"}
        if route.kind is RouteKind.CONTINUE:
            self.states[name] = {**count, "Next": self._following(i)}
        elif route.kind is RouteKind.LOOP_BACK and route.target is not None:
            self.states[name] = {**count, "Next": f"{s.id}: {budget}"}
            self.states[f"{s.id}: {budget}"] = {
                "Type": "Choice",
                "Comment": f"loop back to {route.target} while fewer than {route.max_attempts} attempts failed",
                "Choices": [{"Variable": _counter(s.id, "fails"),
                             "NumericLessThan": route.max_attempts or 1, "Next": route.target}],
                "Default": f"{s.id}: budget spent",
            }
            self.states[f"{s.id}: budget spent"] = {
                "Type": "Pass", "Parameters": {"step": s.id, "reason": "loop_budget_exhausted",
                                               "detail.$": "$.error.Cause"},
                "ResultPath": "$.halt", "Next": DEAD_LETTER,
            }
        else:
            self.states[name] = {**count, "Next": self._halt(s.id)}

    def _halt(self, step_id: str, name: str = "", at: str = "") -> str:
        """The state that halts the task at ``at`` (default: the step) with the reason at
        $.error, made on first use; its name."""
        name = name or f"{step_id}: halt"
        self.states.setdefault(name, {
            "Type": "Pass", "Parameters": {"step": at or step_id, "reason.$": "$.error.Error",
                                           "detail.$": "$.error.Cause"},
            "ResultPath": "$.halt", "Next": DEAD_LETTER,
        })
        return name

    def _error(self, name: str, reason: str, nxt: str, cause: str = "$.error.Cause") -> None:
        """A state that names the failure at $.error and goes on to ``nxt``: ``reason`` and
        ``cause`` are text, or paths into the state when they start with ``$``."""
        def field(key: str, value: str) -> dict[str, str]:
            return {f"{key}.$": value} if value.startswith("$") else {key: value}

        self.states[name] = {"Type": "Pass", "Parameters": {**field("Error", reason), **field("Cause", cause)},
                             "ResultPath": "$.error", "Next": nxt}

    def _no_result(self, s: Step, nxt: str, name: str = "") -> str:
        """A state that clears the step's result (null stands for none: a JSON path cannot
        remove a key) and goes on to ``nxt``; its name."""
        name = name or f"{s.id}: no result"
        self.states[name] = {
            "Type": "Pass", "Comment": f"this attempt records no result: results.{s.id} holds no earlier one",
            "Result": None, "ResultPath": f"$.results['{s.id}']", "Next": nxt,
        }
        return name

    def _catches(self, i: int, s: Step, *, clear: bool = True) -> list[dict[str, Any]]:
        """How the step's task routes an error (at $.error) as the reducer routes the reason
        code. ``clear``: an attempt that ends in an error records no result, so one Catch
        clears the step's result, then a Choice routes the error by name; else the task's
        Catches route it."""
        routes: list[tuple[list[str], str]] = []
        gates = [g.id for g in self.wf.steps[:i] if g.kind is StepKind.HUMAN]
        if gates:  # an approval before it no longer holds: the task halts at the first one
            routes.append((list(HALT_AT_ONCE), f"{s.id}: void"))
            self._halt(s.id, f"{s.id}: void", gates[0])
        halts = [f"outcome:{k}" for k, v in s.outcomes.items() if v is OutcomeRoute.HALT]
        if halts:
            routes.append((halts, self._halt(s.id)))
        routes += [([TRANSIENT], f"{s.id}: retries spent"), (list(SILENT), f"{s.id}: worker lost")]
        self._error(f"{s.id}: retries spent", "retries_exhausted", f"{s.id}: failed")
        self._error(f"{s.id}: worker lost", "worker_died", f"{s.id}: failed",
                    "no heartbeat from the worker; it was delivered again until its deliveries ran out")
        if s.on_conflict is not None:
            routes.append((["conflict"], f"{s.id}: conflict"))
            self._failure(i, s, f"{s.id}: conflict", s.on_conflict, "conflict budget")
        if not clear:
            return [*({"ErrorEquals": errors, "ResultPath": "$.error", "Next": nxt} for errors, nxt in routes),
                    {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": f"{s.id}: failed"}]

        def named(errors: list[str], nxt: str) -> dict[str, Any]:
            rules = [{"Variable": "$.error.Error", "StringEquals": e} for e in errors]
            return {**rules[0], "Next": nxt} if len(rules) == 1 else {"Or": rules, "Next": nxt}

        caught = f"{s.id}: caught"
        self.states[caught] = {"Type": "Choice", "Comment": "the error routes as its reason code does",
                               "Choices": [named(errors, nxt) for errors, nxt in routes],
                               "Default": f"{s.id}: failed"}
        return [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": self._no_result(s, caught)}]

    def _retry(self, s: Step) -> list[dict[str, Any]]:
        p = s.retry
        whole = {"initial_backoff": p.initial_backoff_seconds, "max_backoff": p.max_backoff_seconds}
        for what, seconds in whole.items():
            if seconds < 1 or seconds != int(seconds):
                msg = (f"step {s.id!r}: retry {what} is {seconds:g}s; Step Functions waits whole seconds, "
                       "at least 1")
                raise InputError(msg)
        if p.multiplier < 1:
            raise InputError(f"step {s.id!r}: retry multiplier {p.multiplier:g} is below 1, "
                             "which Step Functions' BackoffRate does not allow")
        retries = [{
            "ErrorEquals": [TRANSIENT, *(LAMBDA_TRANSIENT if self.functions is not None else ())],
            "MaxAttempts": max(0, p.max_attempts - 1),
            "IntervalSeconds": int(p.initial_backoff_seconds),
            "BackoffRate": p.multiplier,
            "MaxDelaySeconds": int(p.max_backoff_seconds),
            "JitterStrategy": "FULL" if p.jitter else "NONE",
        }]
        deliveries = p.max_deliveries or 3
        retries.append({"ErrorEquals": list(SILENT), "MaxAttempts": max(0, deliveries - 1),
                        "IntervalSeconds": 1, "BackoffRate": 1.0})
        return retries

    # --- steps ----------------------------------------------------------------------------
    def _step(self, i: int, s: Step) -> None:
        self.states[s.id] = {
            "Type": "Pass", "Comment": f"{s.kind.value} step owned by {s.owner}: a new attempt",
            "Parameters": {
                "attempts.$": f"States.MathAdd({_counter(s.id, 'attempts')}, 1)",
                "fails.$": _counter(s.id, "fails"), "checks": 0,
            },
            "ResultPath": f"$.sw['{s.id}']",
            "Next": {StepKind.WAIT: f"{s.id}: count check", StepKind.MAP: f"{s.id}: items",
                     StepKind.HUMAN: f"{s.id}: capture" if s.artifacts else f"{s.id}: references"}.get(
                s.kind, f"{s.id}: run"),
        }
        self._failure(i, s, f"{s.id}: failed", s.on_failure, "budget")
        if s.kind is StepKind.WAIT:
            self._wait(i, s)
        elif s.kind is StepKind.MAP:
            self._map(i, s)
        elif s.kind is StepKind.HUMAN:
            self._human(i, s)
        else:
            self._work(i, s)

    def _task(self, s: Step, kind: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "task_token.$": "$$.Task.Token", "task.$": self.task,
            "workflow": self.wf.name, "workflow_hash": self.wf.content_hash,
            "step": s.id, "kind": kind, "attempt.$": _counter(s.id, "attempts"),
            "input.$": "$.input", "results.$": "$.results", "workspace.$": "$.workspace",
            "decisions.$": "$.decisions", **(extra or {}),
        }
        if self.functions is not None:  # Express: the function answers at once, with no token
            del body["task_token.$"]
            return {"Type": "Task", "Resource": self.functions.of(s, "--function"), "Parameters": body,
                    "TimeoutSeconds": max(1, math.ceil(s.timeout_seconds or EXPRESS_SECONDS))}
        return {"Type": "Task", "Resource": SEND_AND_WAIT, "HeartbeatSeconds": self.heartbeat_seconds,
                "Parameters": {"QueueUrl": self.queues.of(s), "MessageBody": body}}

    def _work(self, i: int, s: Step) -> None:
        key = "verdict" if s.kind is StepKind.AI else "result"
        self.states[f"{s.id}: run"] = {
            **self._task(s, s.kind.value),
            "ResultPath": "$.answer", "Retry": self._retry(s), "Catch": self._catches(i, s),
            "Next": f"{s.id}: keep",
        }
        keep = f"{s.id}: keep {key}?"
        if s.kind is StepKind.AI:  # later code steps and checks work in its worktree
            self.states[f"{s.id}: keep"] = {
                "Type": "Choice",
                "Choices": [{"Variable": "$.answer.workspace", "IsPresent": True, "Next": f"{s.id}: keep workspace"}],
                "Default": keep,
            }
            self.states[f"{s.id}: keep workspace"] = {
                "Type": "Pass", "InputPath": "$.answer.workspace", "ResultPath": "$.workspace", "Next": keep,
            }
        else:
            self.states[f"{s.id}: run"]["Next"] = keep
        judged = f"{s.id}: judged"
        self.states[keep] = {
            "Type": "Choice",
            "Choices": [{"Variable": f"$.answer.{key}", "IsPresent": True, "Next": f"{s.id}: keep {key}"}],
            "Default": self._no_result(s, judged, f"{s.id}: without {key}"),
        }
        self.states[f"{s.id}: keep {key}"] = {
            "Type": "Pass", "Comment": f"results.{s.id} is the step's {key}, kept whether it passed or not",
            "InputPath": f"$.answer.{key}", "ResultPath": f"$.results['{s.id}']", "Next": judged,
        }
        self.states[judged] = {
            "Type": "Choice",
            "Choices": [{"Variable": "$.answer.failure", "IsPresent": True, "Next": f"{s.id}: failure"}],
            "Default": self._on_success(i, s),
        }
        routes: list[dict[str, Any]] = [
            {"Variable": "$.error.Error", "StringEquals": f"outcome:{k}", "Next": self._halt(s.id)}
            for k, v in s.outcomes.items() if v is OutcomeRoute.HALT
        ]
        if s.on_conflict is not None:
            routes.append({"Variable": "$.error.Error", "StringEquals": "conflict", "Next": f"{s.id}: conflict"})
        self.states[f"{s.id}: failure"] = {
            "Type": "Pass", "Comment": "a failed attempt whose verdict or result is kept",
            "Parameters": {"Error.$": "$.answer.failure.reason", "Cause.$": "$.answer.failure.detail"},
            "ResultPath": "$.error", "Next": f"{s.id}: failure route" if routes else f"{s.id}: failed",
        }
        if routes:
            self.states[f"{s.id}: failure route"] = {"Type": "Choice", "Choices": routes, "Default": f"{s.id}: failed"}

    def _map(self, i: int, s: Step) -> None:
        """A Map state whose iterations run the child workflow's states inline, one per item
        (input ``{"item", "index"}``), at most ``max_concurrency`` at once; more failed
        children than tolerated fail the step with ``map_failures``."""
        spec = s.map
        if spec is None:
            raise InputError(f"step {s.id!r}: a map step without its map")
        if self.child:
            raise InputError(f"step {s.id!r}: a map step inside a map step's child workflow is not exported; "
                             "Step Functions runs the child inline, one level deep here")
        child = self.wf.children.get(spec.workflow_hash) if spec.workflow_hash else None
        if child is None:
            raise InputError(f"step {s.id!r}: its workflow {spec.workflow!r} is found by name when a task starts; "
                             "name its file (workflow: FILE.yaml) so the export can hold its states")
        # the child's name: the execution's (a Distributed Map's child execution's), the step, its
        # attempt, the item's index
        task = f"States.Format('{{}}/{s.id}/{{}}/{{}}', $$.Execution.Id, $.map_attempt, $.input.index)"
        inner = _Builder(child, self.queues, self.heartbeat_seconds, self.functions, task=task, child=True).build()
        items = jsonpath(spec.items)
        self.states[f"{s.id}: items"] = {
            "Type": "Choice", "Comment": "the items the map step works on must be there",
            "Choices": _missing([spec.items], f"{s.id}: missing reference"),
            "Default": f"{s.id}: run",
        }
        failed = self._no_result(s, f"{s.id}: failed")
        self._error(f"{s.id}: missing reference", "missing_reference", failed, f"{spec.items} finds nothing")
        state: dict[str, Any] = {
            "Type": "Map", "Comment": f"one child task of {child.name} per item",
            "ItemsPath": items,
            "ItemSelector": {"item.$": "$$.Map.Item.Value", "index.$": "$$.Map.Item.Index",
                             "map_attempt.$": _counter(s.id, "attempts")},
            "ItemProcessor": {"ProcessorConfig": {"Mode": "INLINE"}, "StartAt": inner["StartAt"],
                              "States": inner["States"]},
            "MaxConcurrency": spec.max_concurrency,
            "ResultSelector": {"results.$": "$"}, "ResultPath": f"$.results['{s.id}']",
            "Catch": [
                # items that are not a list (States.QueryEvaluationError: what newer interpreters name it)
                {"ErrorEquals": ["States.Runtime", "States.QueryEvaluationError"], "ResultPath": "$.error",
                 "Next": f"{s.id}: not a list"},
                {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": f"{s.id}: too many failed"},
            ],
            "Next": self._on_success(i, s),
        }
        if spec.tolerated_percent is not None or spec.tolerated_failures:
            # Step Functions counts tolerated failures only in a Distributed Map (its items run
            # as child executions); an inline Map fails at its first failed item
            if self.functions is not None:
                raise InputError(f"step {s.id!r}: tolerated_failures need a Distributed Map, which an Express "
                                 "workflow cannot run; export it as Standard (without --express)")
            state["ItemProcessor"]["ProcessorConfig"] = {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"}
            if spec.tolerated_percent is not None:
                state["ToleratedFailurePercentage"] = spec.tolerated_percent
            else:
                state["ToleratedFailureCount"] = spec.tolerated_failures
        self.states[f"{s.id}: run"] = state
        self._error(f"{s.id}: not a list", "items_not_a_list", failed, f"{spec.items} is not a list")
        self._error(f"{s.id}: too many failed", "map_failures", failed)

    def _wait(self, i: int, s: Step) -> None:
        if s.every_seconds != int(s.every_seconds):
            raise InputError(f"step {s.id!r}: every {s.every_seconds:g}s; Step Functions waits whole seconds")
        self.states[f"{s.id}: count check"] = {
            "Type": "Pass", "Parameters": {
                "attempts.$": _counter(s.id, "attempts"), "fails.$": _counter(s.id, "fails"),
                "checks.$": f"States.MathAdd({_counter(s.id, 'checks')}, 1)",
            },
            "ResultPath": f"$.sw['{s.id}']", "Next": f"{s.id}: run",
        }
        self.states[f"{s.id}: run"] = {
            **self._task(s, "check", {"check.$": _counter(s.id, "checks")}),
            "ResultSelector": {
                "check.$": "$.check", "passed.$": "$.passed", "detail.$": "$.detail"},
            "ResultPath": f"$.results['{s.id}']", "Retry": self._retry(s), "Catch": self._catches(i, s),
            "Next": f"{s.id}: passed?",
        }
        self.states[f"{s.id}: passed?"] = {
            "Type": "Choice",
            "Choices": [
                {"Variable": f"$.results['{s.id}'].passed", "BooleanEquals": True, "Next": self._on_success(i, s)},
                {"Variable": _counter(s.id, "checks"), "NumericGreaterThanEquals": s.max_checks,
                 "Next": f"{s.id}: exhausted"},
            ],
            "Default": f"{s.id}: wait",
        }
        self._error(f"{s.id}: exhausted", "wait_exhausted", f"{s.id}: failed", f"$.results['{s.id}'].detail")
        self.states[f"{s.id}: wait"] = {"Type": "Wait", "Seconds": int(s.every_seconds),
                                         "Next": f"{s.id}: count check"}

    def _human(self, i: int, s: Step) -> None:
        refs = list(s.proposal)
        after_refs = f"{s.id}: propose"
        if refs:
            self.states[f"{s.id}: references"] = {
                "Type": "Choice", "Comment": "every reference the proposal declares must find a value",
                "Choices": _missing(refs, f"{s.id}: missing reference"),
                "Default": after_refs,
            }
            self._error(f"{s.id}: missing reference", "missing_reference", f"{s.id}: failed",
                        "a reference the proposal declares finds nothing")
        else:
            self.states[f"{s.id}: references"] = {"Type": "Pass", "Next": after_refs}
        if s.artifacts:
            catches = self._catches(i, s, clear=False)  # a human step records no result
            self.states[f"{s.id}: capture"] = {
                **self._task(s, "capture", {"artifacts": list(s.artifacts)}),
                "ResultSelector": {"artifacts.$": "$.artifacts"},
                "ResultPath": "$.captured", "Retry": self._retry(s), "Catch": catches,
                "Next": f"{s.id}: references",
            }
        shown: dict[str, Any] = {"workflow": self.wf.name, "workflow_hash": self.wf.content_hash}
        if refs:
            shown["fields"] = {f"{r}.$": jsonpath(r) for r in refs}
        else:
            shown.update({"input.$": "$.input", "results.$": "$.results"})
        if s.artifacts:
            shown["artifacts.$"] = "$.captured.artifacts"
        self.states[f"{s.id}: propose"] = {
            "Type": "Pass", "Comment": "the proposal the approvers see; its sha256 goes with it",
            "Parameters": shown, "ResultPath": "$.proposal", "Next": f"{s.id}: run",
        }
        extra: dict[str, Any] = {
            "proposal.$": "$.proposal",
            "proposal_hash.$": "States.Hash(States.JsonToString($.proposal), 'SHA-256')",
            "role": s.approvers_role or "", "separate_from": list(s.separate_from),
            "reject_codes": list(self.wf.reject_codes_of(s)),
        }
        task: dict[str, Any] = {**self._task(s, "human", extra), "ResultPath": "$.answer"}
        task.pop("HeartbeatSeconds", None)  # a person does not heartbeat
        if s.expires_after_seconds is not None:
            task["TimeoutSeconds"] = max(1, math.ceil(s.expires_after_seconds))
        task["Catch"] = [
            {"ErrorEquals": ["States.Timeout"], "ResultPath": "$.error", "Next": f"{s.id}: expired"},
            {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": f"{s.id}: failed"},
        ]
        task["Next"] = f"{s.id}: decision"
        self.states[f"{s.id}: run"] = task
        # the decision (or its absence) is kept per step: later messages carry it, so a
        # worker that records the execution in statewright's store records it too
        self.states[f"{s.id}: decision"] = {
            "Type": "Pass", "Parameters": {"answer.$": "$.answer", "attempt.$": _counter(s.id, "attempts")},
            "ResultPath": f"$.decisions['{s.id}']", "Next": f"{s.id}: decided",
        }
        self.states[f"{s.id}: expired"] = {
            "Type": "Pass", "Parameters": {"expired": True, "attempt.$": _counter(s.id, "attempts")},
            "ResultPath": f"$.decisions['{s.id}']", "Next": f"{s.id}: expiry",
        }
        self._error(f"{s.id}: expiry", "approval_expired", f"{s.id}: failed", "no approval before the deadline")
        after = self._on_success(i, s)
        if after in (DONE, DONE_EARLY):  # nothing follows to carry the decision: say that the task ended
            self.states[f"{s.id}: ended"] = {
                "Type": "Task", "Resource": SEND, "Comment": "the task ended on this step's approval",
                "Parameters": {"QueueUrl": self.queues.of(s), "MessageBody": {
                    "kind": "ended", "task.$": self.task, "workflow": self.wf.name,
                    "workflow_hash": self.wf.content_hash, "step": s.id, "decisions.$": "$.decisions",
                }},
                "ResultPath": None,
                "Retry": [{"ErrorEquals": ["States.ALL"], "MaxAttempts": 3, "IntervalSeconds": 1,
                           "BackoffRate": 2.0}],
                "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": None, "Next": after}],
                "Next": after,
            }
            after = f"{s.id}: ended"
        self.states[f"{s.id}: decided"] = {
            "Type": "Choice",
            "Choices": [
                {"Variable": "$.answer.approved", "BooleanEquals": True, "Next": after},
                {"Variable": "$.answer.reason_code", "IsPresent": True, "Next": f"{s.id}: rejected"},
            ],
            "Default": f"{s.id}: not approved",
        }
        self._error(f"{s.id}: rejected", "$.answer.reason_code", f"{s.id}: failed", "$.answer.actor")
        self._error(f"{s.id}: not approved", "not_approved", f"{s.id}: failed", "$.answer.actor")

    def _ends(self) -> None:
        self.states[DONE] = {"Type": "Pass", "Result": "completed", "ResultPath": "$.outcome", "Next": "Succeeded"}
        if any(DONE_EARLY in _targets(st) for st in self.states.values()):
            self.states[DONE_EARLY] = {"Type": "Pass", "Result": "completed_early", "ResultPath": "$.outcome",
                                       "Next": "Succeeded"}
        # a map step's child ends with its results: the Map state gathers them in item order
        self.states["Succeeded"] = {"Type": "Succeed", **({"OutputPath": "$.results"} if self.child else {})}
        self.states[DEAD_LETTER] = {
            "Type": "Task", "Resource": SEND, "Comment": "the halted task, for the operator queue",
            "Parameters": {"QueueUrl": self.queues.dead_letters(), "MessageBody": {
                "kind": "halted", "task.$": self.task, "workflow": self.wf.name,
                "workflow_hash": self.wf.content_hash, "decisions.$": "$.decisions",
                "step.$": "$.halt.step", "reason.$": "$.halt.reason", "detail.$": "$.halt.detail",
            }},
            "ResultPath": None,
            "Retry": [{"ErrorEquals": ["States.ALL"], "MaxAttempts": 3, "IntervalSeconds": 1, "BackoffRate": 2.0}],
            "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": None, "Next": HALTED}],
            "Next": HALTED,
        }
        self.states[HALTED] = {"Type": "Fail", "ErrorPath": "$.halt.reason", "CausePath": "$.halt.detail"}
