"""The pure task reducer: ``transition(state, event) -> (state, commands)``.

No I/O, no clock, no randomness: time arrives inside events. An illegal event raises
IllegalEventError (or its ApprovalError leaf) and the caller's state is unchanged.

Idempotency keys (what an effect's target is given to recognise a repeat) are
``TASK/STEP/ATTEMPT``, or ``TASK/STEP/ATTEMPT/HASH16`` for a step after an approved human
step, where HASH16 is the first 16 hex digits of the approved proposal's sha256. A wait
step's check N runs under ``KEY/check-N``. Entering a step (the first time, on a
continue, or on a loop-back) starts a new attempt under a new key; an operator's retry of a
halted step and a repair turn run again under the key of the attempt they repeat, so a
target that saw the first write can refuse the second. Command ids stay unique per run
(``TASK/STEP/ATTEMPT``, ``.../repair``, ``.../check-N``): a report's event id is made from
its command id. A notification's key (and command id) is ``TASK/EVENT/TARGET``: EVENT is
``STEP/ATTEMPT/approval`` (``approval-N`` when evidence built the proposal again),
``STEP/ATTEMPT/stuck`` or ``halted-EPOCH``, TARGET the target's kind and a hash of it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from statewright._canonical import canonical_json
from statewright._errors import CONFLICT, ApprovalError, IllegalEventError, Refusal
from statewright._names import holds_role, is_agent_name, person_name_problem, remote_timer_ids, scope_text
from statewright._time import when
from statewright.approvals.proposal import artifact_hashes, proposal_hash
from statewright.definition.model import OutcomeRoute, RouteKind, Step, StepKind
from statewright.definition.notify import NotifyEvent
from statewright.machine._records import replace
from statewright.machine.brief import build_brief, cut_output
from statewright.machine.children import ParentRef
from statewright.machine.commands import (
    CaptureArtifacts,
    Command,
    Notify,
    RequestApproval,
    RunCheck,
    RunStep,
    StartTimer,
)
from statewright.machine.events import (
    ApprovalGranted,
    ApprovalRejected,
    ArtifactsCaptured,
    AttemptReported,
    CheckReported,
    ChildEnded,
    Event,
    EvidenceAdded,
    NotificationSent,
    TaskCancelled,
    TaskRetried,
    TaskSubmitted,
    TimerFired,
)
from statewright.machine.fanout import (
    MAP_ACTOR,
    SYSTEM_ACTORS,
    ItemsError,
    MapEnd,
    cascade,
    map_end,
    map_items,
    parent_of,
    record_end,
    start_more,
)
from statewright.machine.labels import label_commands
from statewright.machine.paths import MISSING_REFERENCE, RefError, parse_ref, resolve
from statewright.machine.state import (
    Approval,
    Attempt,
    Current,
    Evidence,
    HaltInfo,
    LoopBack,
    OperatorAction,
    Outcome,
    TaskState,
    TaskStatus,
)

Result = tuple[TaskState, list[Command]]
_ANY_OBJECT: Mapping[str, Any] = {"type": "object"}
KEY_HASH_DIGITS = 16  # hex digits of the approved proposal hash a key carries

#: Which events each status accepts. Everything else is illegal. A notification's outcome is
#: recorded whatever the task has done since (it may have ended); a TimerFired while running
#: is the step's stuck_after timer, and only that one.
_NOTIFIED = NotificationSent.type
_CHILD = ChildEnded.type  # a child's end is recorded whatever the parent has done since
LEGAL: Mapping[TaskStatus, frozenset[str]] = {
    TaskStatus.NEW: frozenset({TaskSubmitted.type}),
    TaskStatus.RUNNING: frozenset(
        {AttemptReported.type, CheckReported.type, ArtifactsCaptured.type, EvidenceAdded.type,
         TaskCancelled.type, TimerFired.type, _NOTIFIED, _CHILD}  # a timer: a remote deadline, or stuck
    ),
    TaskStatus.WAITING: frozenset({TimerFired.type, EvidenceAdded.type, TaskCancelled.type, _NOTIFIED, _CHILD}),
    TaskStatus.AWAITING_APPROVAL: frozenset(
        {ApprovalGranted.type, ApprovalRejected.type, TimerFired.type, EvidenceAdded.type,
         TaskCancelled.type, _NOTIFIED, _CHILD}
    ),
    TaskStatus.HALTED: frozenset({TaskRetried.type, EvidenceAdded.type, TaskCancelled.type, _NOTIFIED, _CHILD}),
    TaskStatus.COMPLETED: frozenset({_NOTIFIED, _CHILD}),
    TaskStatus.COMPLETED_EARLY: frozenset({_NOTIFIED, _CHILD}),
    TaskStatus.CANCELLED: frozenset({_NOTIFIED, _CHILD}),
}


def transition(state: TaskState, event: Event) -> Result:
    """Apply one event. Returns the new state (version + 1) and the commands to perform."""
    if event.type not in LEGAL[state.status]:
        msg = (
            f"task {state.task_id}: event {event.type} is not allowed while the task is "
            f"{state.status.value}"
        )
        raise IllegalEventError(msg, status=state.status.value, event_type=event.type)
    handler = _HANDLERS[event.type]
    new, commands = handler(state, event)
    if new.status is TaskStatus.HALTED and state.status is not TaskStatus.HALTED and new.halt is not None:
        commands = [*commands, *_halt_notices(new, new.halt)]
    new = replace(new, version=state.version + 1, updated_at_ms=event.at_ms)
    if new.parent is not None or new.children:  # a child's end goes to its parent; orphans are cancelled
        new, related = cascade(state, new, event)
        commands = [*commands, *related]
    if new.workflow.github is not None:  # the labels on its issue or pull request follow
        commands = [*commands, *label_commands(state, new)]
    return new, commands


def is_machine_actor(actor: str) -> bool:
    """Agents and code report as ``agent:...`` / ``code:...``; people have plain names."""
    return is_agent_name(actor)


APPROVAL_REVOKED = "approval_revoked"  # the worker found an approval no longer holds
ARTIFACT_CHANGED = "artifact_changed"  # an approved artifact reads differently now
VOIDED_APPROVAL = frozenset({APPROVAL_REVOKED, ARTIFACT_CHANGED})


# --- entering steps -----------------------------------------------------------------------


def idempotency_key(state: TaskState, index: int, attempt: int) -> str:
    """The key of a new attempt of the step at ``index`` (see the module docstring): it
    names the task, step and attempt, and the approval in force, if any: the latest
    approval of a human step before this one."""
    wf = state.workflow
    key = f"{state.task_id}/{wf.steps[index].id}/{attempt}"
    for approval in reversed(state.approvals):
        if wf.index_of(approval.step) < index:
            return f"{key}/{approval.proposal_hash[:KEY_HASH_DIGITS]}"
    return key


def _enter(state: TaskState, index: int, at_ms: int, *, key: str = "") -> Result:
    """Start the step at ``index``: a new attempt, under a new idempotency key unless
    ``key`` (an operator's retry) names the key of the attempt it runs again. A step with
    ``stuck_after`` also starts its stuck timer, while the attempt is still in flight."""
    new, commands = _start(state, index, at_ms, key=key)
    wf = state.workflow
    if index >= len(wf.steps) or wf.steps[index].stuck_after_seconds is None:
        return new, commands
    step = wf.steps[index]
    cur = new.current
    number = len(state.attempts_of(step.id)) + 1
    if cur is None or cur.step != step.id or cur.attempt != number:
        return new, commands  # the attempt already ended (a proposal that could not be built)
    timer_id = f"{state.task_id}/{step.id}/{number}/stuck"
    due = at_ms + int((step.stuck_after_seconds or 0) * 1000)
    timer = StartTimer(command_id=timer_id, task_id=state.task_id, step=step.id, attempt=number,
                       timer_id=timer_id, due_at_ms=due, purpose="stuck")
    return replace(new, current=replace(cur, stuck_timer_id=timer_id)), [*commands, timer]


def _start(state: TaskState, index: int, at_ms: int, *, key: str = "") -> Result:
    wf = state.workflow
    if index >= len(wf.steps):
        return replace(state, status=TaskStatus.COMPLETED, current=None, step_index=index), []
    step = wf.steps[index]
    number = len(state.attempts_of(step.id)) + 1
    cid = f"{state.task_id}/{step.id}/{number}"
    state = replace(state, step_index=index)
    if step.kind in (StepKind.AI, StepKind.CODE):
        key = key or idempotency_key(state, index, number)
        cur = Current(step=step.id, attempt=number, started_at_ms=at_ms, command_id=cid, key=key)
        state = replace(state, status=TaskStatus.RUNNING, current=cur)
        brief = build_brief(state, step, number) if step.kind is StepKind.AI or step.remote else {}
        cmd = RunStep(
            command_id=cid, task_id=state.task_id, step=step.id, attempt=number,
            kind=step.kind.value, idempotency_key=key, brief=brief,
        )
        return state, [cmd]
    if step.kind is StepKind.WAIT:
        key = key or idempotency_key(state, index, number)
        check_id = f"{cid}/check-1"
        cur = Current(step=step.id, attempt=number, started_at_ms=at_ms, command_id=check_id, key=key)
        state = replace(state, status=TaskStatus.RUNNING, current=cur)
        return state, [
            RunCheck(
                command_id=check_id, task_id=state.task_id, step=step.id, attempt=number,
                check_number=1, idempotency_key=f"{key}/check-1",
            )
        ]
    if step.kind is StepKind.MAP:
        return _start_map(state, step, index, number, at_ms, key)
    if step.artifacts:  # read them first: the proposal shows them by content hash
        capture_id = f"{cid}/capture"
        cur = Current(step=step.id, attempt=number, started_at_ms=at_ms, command_id=capture_id)
        state = replace(state, status=TaskStatus.RUNNING, current=cur)
        return state, [
            CaptureArtifacts(command_id=capture_id, task_id=state.task_id, step=step.id, attempt=number,
                             artifacts=step.artifacts)
        ]
    cur = Current(step=step.id, attempt=number, started_at_ms=at_ms)
    return _await_approval(replace(state, current=cur), step, at_ms)


def _start_map(state: TaskState, step: Step, index: int, number: int, at_ms: int, key: str) -> Result:
    """Start a map step's attempt: its first children, up to ``max_concurrency``. Items that
    cannot be read, or are not a list, fail the attempt (routed like any failure); an empty
    list passes at once."""
    cur = Current(step=step.id, attempt=number, started_at_ms=at_ms, key=key or idempotency_key(state, index, number))
    state = replace(state, status=TaskStatus.RUNNING, current=cur)
    try:
        items = map_items(state, step)
    except ItemsError as exc:
        return _finish(state, at_ms, Outcome.FAILED, actor=MAP_ACTOR, reason=exc.reason, detail=str(exc))
    started, cmds = start_more(state, step, number, items)
    end = map_end(started, step, number, len(items))
    return (started, cmds) if end is None else _map_finish(started, at_ms, end)


def _map_finish(state: TaskState, at_ms: int, end: MapEnd) -> Result:
    outcome = Outcome.PASSED if end.passed else Outcome.FAILED
    return _finish(state, at_ms, outcome, actor=MAP_ACTOR, reason=end.reason, detail=end.detail, result=end.result)


def _await_approval(state: TaskState, step: Step, at_ms: int) -> Result:
    """Build the human step's proposal, hash it, and ask for the approval (the window, if
    any, opens now). A declared reference that finds nothing fails the step's attempt with
    ``missing_reference``, which routes like any failure."""
    cur = _current(state)
    cid = f"{state.task_id}/{step.id}/{cur.attempt}"
    try:
        h = proposal_hash(state, state.workflow.index_of(step.id))
    except RefError as exc:
        return _finish(state, at_ms, Outcome.FAILED, actor="statewright:proposal",
                       reason=MISSING_REFERENCE, detail=str(exc))
    expires = None
    timer_id = ""
    if step.expires_after_seconds is not None:
        expires = at_ms + int(step.expires_after_seconds * 1000)
        timer_id = f"{cid}/expiry"
    cur = replace(cur, command_id=f"{cid}/notify", proposal_hash=h, expires_at_ms=expires, timer_id=timer_id)
    state = replace(state, status=TaskStatus.AWAITING_APPROVAL, current=cur)
    cmds: list[Command] = [
        RequestApproval(
            command_id=f"{cid}/notify", task_id=state.task_id, step=step.id, attempt=cur.attempt,
            proposal_hash=h, role=step.approvers_role or "", expires_at_ms=expires,
        ),
        *_notices(state, NotifyEvent.APPROVAL, step, cur.attempt, {
            "proposal_hash": h, "role": step.approvers_role or "", "expires_at_ms": expires,
        }),
    ]
    if expires is not None:
        cmds.append(
            StartTimer(
                command_id=timer_id, task_id=state.task_id, step=step.id, attempt=cur.attempt,
                timer_id=timer_id, due_at_ms=expires, purpose="approval_expiry",
            )
        )
    return state, cmds


# --- notifications ------------------------------------------------------------------------


def _notices(state: TaskState, event: NotifyEvent, step: Step, attempt: int, facts: Mapping[str, Any], *,
             again: int = 0) -> list[Command]:
    """One Notify command per target of ``event``, each under its own idempotency key
    TASK/EVENT/TARGET (a halt's event is named by the epoch it ended: a task halts at most
    once per epoch; ``again``: the proposal of an approval built again, the Nth time)."""
    ref = f"halted-{state.epoch}" if event is NotifyEvent.HALTED else f"{step.id}/{attempt}/{event.value}"
    ref += f"-{again}" if again else ""
    common = {"workflow": state.workflow.name, "status": state.status.value, **facts}
    out: list[Command] = []
    for target in state.workflow.targets(event, step):
        key = f"{state.task_id}/{ref}/{target.target_id}"
        out.append(Notify(command_id=key, task_id=state.task_id, step=step.id, attempt=attempt, event=event.value,
                          target=target.to_dict(), idempotency_key=key, facts=common))
    return out


def _halt_notices(state: TaskState, halt: HaltInfo) -> list[Command]:
    step = state.workflow.step(halt.step)
    attempts = state.attempts_of(step.id)
    return _notices(state, NotifyEvent.HALTED, step, attempts[-1].number if attempts else 0,
                    {"reason": halt.reason, "detail": cut_output(halt.detail)})


# --- finishing attempts -------------------------------------------------------------------


def _finish(
    state: TaskState,
    at_ms: int,
    outcome: Outcome,
    *,
    actor: str,
    reason: str = "",
    detail: str = "",
    verdict: Mapping[str, Any] | None = None,
    artifacts: Mapping[str, str] | None = None,
    output: str = "",
    cost: Mapping[str, float] | None = None,
    note: str = "",
    result: Mapping[str, Any] | None = None,
    deliveries: int = 1,
    retries: int = 0,
) -> Result:
    cur = _current(state)
    wf = state.workflow
    index = wf.index_of(cur.step)
    step = wf.steps[index]
    attempt = Attempt(
        step=step.id, kind=step.kind.value, owner=step.owner, actor=actor, number=cur.attempt,
        outcome=outcome, reason=reason, detail=detail,
        verdict=dict(verdict) if verdict is not None else None,
        artifacts=dict(artifacts or {}), output=cut_output(output), cost=dict(cost or {}),
        note=note, started_at_ms=cur.started_at_ms, ended_at_ms=at_ms, epoch=state.epoch,
        checks=cur.checks, key=cur.key, deliveries=deliveries, retries=retries,
    )

    # The step's result: a code step's output, an ai step's verdict, a wait step's last check.
    # The latest attempt's replaces an earlier one (a loop-back), and an attempt that records
    # none leaves the step without one; the attempts keep the history.
    value = result if result is not None else (verdict if step.kind is StepKind.AI else None)
    results = {k: v for k, v in state.results.items() if k != step.id}
    if isinstance(value, Mapping):
        results[step.id] = dict(value)

    def record(route: str) -> TaskState:
        return replace(state, attempts=(*state.attempts, replace(attempt, route=route)), current=None,
                       results=results)

    if outcome is Outcome.PASSED:
        if step.on_success.kind is RouteKind.COMPLETE:
            early = index < len(wf.steps) - 1
            status = TaskStatus.COMPLETED_EARLY if early else TaskStatus.COMPLETED
            return replace(record("complete"), status=status), []
        return _enter(record("continue"), index + 1, at_ms)
    if outcome is Outcome.HALTED:
        halted = replace(
            record("halt (policy)"), status=TaskStatus.HALTED,
            halt=HaltInfo(step=step.id, reason=reason or "policy_halt", detail=detail),
        )
        return halted, []
    # A conflict (the effect's record changed since the proposal was built) takes the
    # step's on_conflict route: back to analysis or review, for a new approval.
    route = step.on_conflict if reason == CONFLICT and step.on_conflict is not None else step.on_failure
    if route.kind is RouteKind.CONTINUE:
        return _enter(record("continue (advisory)"), index + 1, at_ms)
    if route.kind is RouteKind.LOOP_BACK and route.target is not None:
        # The budget counts this step's own failures in this epoch: another loop that
        # re-runs the step (and the step passing) must not spend it.
        used = 1 + sum(
            a.outcome is Outcome.FAILED for a in state.attempts_of(step.id, epoch=state.epoch)
        )
        limit = route.max_attempts or 1
        if used < limit:
            target_attempts = state.attempts_of(route.target)
            lb = LoopBack(
                target=route.target,
                target_attempt=target_attempts[-1].number if target_attempts else 0,
                failed_step=step.id, failed_attempt=cur.attempt, reason=reason,
                must_fix=_must_fix(verdict), output=cut_output(output or detail),
            )
            looped = replace(record(f"loop_back->{route.target}"), loop_backs=(*state.loop_backs, lb))
            return _enter(looped, wf.index_of(route.target), at_ms)
        halted = replace(
            record("halt (loop budget exhausted)"), status=TaskStatus.HALTED,
            halt=HaltInfo(
                step=step.id, reason="loop_budget_exhausted",
                detail=f"{step.id} failed {used} of {limit} attempts; last reason: {reason}",
            ),
        )
        return halted, []
    halted = replace(
        record("halt"), status=TaskStatus.HALTED,
        halt=HaltInfo(step=step.id, reason=reason or "failed", detail=detail),
    )
    return halted, []


def _must_fix(verdict: Mapping[str, Any] | None) -> tuple[str, ...]:
    if verdict is not None:
        items = verdict.get("must_fix")
        if isinstance(items, list):
            return tuple(str(i) for i in items)
    return ()


def _current(state: TaskState) -> Current:
    if state.current is None:
        msg = f"task {state.task_id}: no step is in flight (status {state.status.value})"
        raise IllegalEventError(msg, status=state.status.value)
    return state.current


def _step(state: TaskState) -> Step:
    return state.workflow.step(_current(state).step)


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    import json

    from jsonschema.validators import validator_for

    schema = json.loads(schema_json)
    return validator_for(schema)(schema)


def verdict_error(schema: Mapping[str, Any], verdict: object) -> str | None:
    """None when the verdict is valid; otherwise the validation message."""
    if not isinstance(verdict, Mapping):
        return f"the verdict must be a JSON object, got {type(verdict).__name__}"
    from jsonschema.exceptions import best_match

    err = best_match(_validator(canonical_json(schema)).iter_errors(dict(verdict)))
    if err is None:
        return None
    path = "/".join(str(p) for p in err.absolute_path)
    return f"{path or '(root)'}: {err.message}"


def output_problem(schema: Mapping[str, Any], result: Mapping[str, Any] | None) -> str | None:
    """None when a code step's result matches its output_schema; otherwise one line naming
    the path that does not."""
    if result is None:
        return "the step declares an output_schema but wrote no output (STATEWRIGHT_OUTPUT or 'output')"
    problem = verdict_error(schema, result)
    return None if problem is None else f"the output does not match the output_schema at {problem}"


# --- handlers -----------------------------------------------------------------------------


def _on_submitted(state: TaskState, ev: TaskSubmitted) -> Result:
    parent = ParentRef.from_dict(ev.parent) if ev.parent else None
    started = replace(state, input=dict(ev.input), created_at_ms=ev.at_ms, parent=parent)
    schema = state.workflow.input_schema
    err = verdict_error(schema, ev.input) if schema is not None else None
    if err is not None and parent is None:
        raise IllegalEventError(f"task {state.task_id}: input does not match input_schema: {err}")
    started = replace(started, priority=ev.priority, tenant=ev.tenant)
    if err is not None:  # a child's input came from its parent, not from a caller to refuse: it halts
        first = state.workflow.steps[0].id
        halt = HaltInfo(step=first, reason="invalid_input", detail=f"input does not match input_schema: {err}")
        return replace(started, status=TaskStatus.HALTED, halt=halt), []
    return _enter(started, 0, ev.at_ms)


def _on_child_ended(state: TaskState, ev: ChildEnded) -> Result:
    """Record how a child ended; a map step waiting on it starts the next child, or ends."""
    new = record_end(state, ev)
    if new is None:
        msg = f"task {state.task_id}: {ev.child_id!r} is not a child of step {ev.step!r} attempt {ev.attempt}"
        raise IllegalEventError(msg, status=state.status.value, event_type=ev.type)
    cur = new.current
    if new.status is not TaskStatus.RUNNING or cur is None or (cur.step, cur.attempt) != (ev.step, ev.attempt):
        return new, []
    step = _step(new)
    try:
        items = map_items(new, step)
    except ItemsError as exc:  # read when the attempt started; nothing since can change them
        return _finish(new, ev.at_ms, Outcome.FAILED, actor=MAP_ACTOR, reason=exc.reason, detail=str(exc))
    end = map_end(new, step, cur.attempt, len(items))
    return start_more(new, step, cur.attempt, items) if end is None else _map_finish(new, ev.at_ms, end)


def _on_attempt(state: TaskState, ev: AttemptReported) -> Result:
    cur = _current(state)
    step = _step(state)
    if step.kind not in (StepKind.AI, StepKind.CODE) or ev.command_id != cur.command_id:
        msg = (
            f"task {state.task_id}: report for command {ev.command_id!r} does not match the "
            f"command in flight ({cur.command_id!r}); it is stale or duplicated"
        )
        raise IllegalEventError(msg, status=state.status.value, event_type=ev.type)
    common: dict[str, Any] = {
        "actor": ev.actor, "artifacts": ev.artifacts, "output": ev.output,
        "cost": ev.cost, "note": ev.note, "result": ev.result, "deliveries": ev.deliveries, "retries": ev.retries,
    }
    if step.kind is StepKind.CODE:  # a code step's output_schema holds its result, not a verdict
        if step.output_schema is not None and ev.ok and ev.error is None:
            problem = output_problem(step.output_schema, ev.result)
            if problem is not None:
                return _finish(state, ev.at_ms, Outcome.FAILED, reason="invalid_output", detail=problem,
                               **{**common, "result": None})
        if step.outcomes and ev.result is not None:
            ev = replace(ev, verdict=ev.result)  # its outcome routes the task as a verdict's would
    schema = step.output_schema if step.kind is StepKind.AI else None
    if schema is None and ev.verdict is not None:
        schema = _ANY_OBJECT  # without a schema a verdict is optional, but still an object
    if ev.error == "invalid_verdict" or (
        ev.ok and ev.error is None and schema is not None
        and verdict_error(schema, ev.verdict) is not None
    ):
        problem = ev.detail if ev.error else verdict_error(schema or {}, ev.verdict)
        if not cur.repair_used:
            return _repair(state, step, cur, problem or "invalid verdict")
        return _finish(state, ev.at_ms, Outcome.FAILED, reason="invalid_verdict",
                       detail=problem or "", verdict=None, **common)
    if ev.error in VOIDED_APPROVAL:
        return _approval_void(state, ev.at_ms, ev.error, ev.detail, common)
    if not ev.ok or ev.error is not None:
        kept = ev.verdict if isinstance(ev.verdict, Mapping) else None
        return _finish(state, ev.at_ms, Outcome.FAILED, reason=ev.error or "failed",
                       detail=ev.detail, verdict=kept, **common)
    verdict = ev.verdict
    if verdict is not None and step.outcomes:
        name = str(verdict.get("outcome"))
        mapped = step.outcomes.get(name)
        if mapped is OutcomeRoute.PASS:
            return _finish(state, ev.at_ms, Outcome.PASSED, verdict=verdict, **common)
        outcome = Outcome.HALTED if mapped is OutcomeRoute.HALT else Outcome.FAILED
        return _finish(state, ev.at_ms, outcome, reason=f"outcome:{name}", verdict=verdict,
                       detail=str(verdict.get("summary", "")), **common)
    if verdict is not None and verdict.get("approved") is False:
        return _finish(state, ev.at_ms, Outcome.FAILED, reason="not_approved", verdict=verdict,
                       detail="; ".join(_must_fix(verdict)), **common)
    return _finish(state, ev.at_ms, Outcome.PASSED, verdict=verdict, **common)


def _approval_void(state: TaskState, at_ms: int, reason: str, detail: str, common: dict[str, Any]) -> Result:
    """The step did not run: an approval it follows no longer holds (``approval_revoked``,
    ``artifact_changed``). The task halts AT the first approved human step before it,
    whatever the step's route, so an operator's retry asks for new approvals from there."""
    halted, commands = _finish(state, at_ms, Outcome.HALTED, reason=reason, detail=detail, **common)
    wf = state.workflow
    gates = [
        s.id for s in wf.steps[: wf.index_of(_current(state).step)]
        if s.kind is StepKind.HUMAN and state.attempts_of(s.id)
        and state.attempts_of(s.id)[-1].outcome is Outcome.PASSED
    ]
    if not gates or halted.halt is None:
        return halted, commands
    return replace(halted, halt=replace(halted.halt, step=gates[0])), commands


def _repair(state: TaskState, step: Step, cur: Current, problem: str) -> Result:
    cid = f"{cur.command_id}/repair"
    new = replace(state, current=replace(cur, command_id=cid, repair_used=True))
    brief = build_brief(new, step, cur.attempt, repair_error=problem)
    return new, [
        RunStep(
            command_id=cid, task_id=state.task_id, step=step.id, attempt=cur.attempt,
            kind=step.kind.value, idempotency_key=cur.key or cid, brief=brief, repair_error=problem,
        )
    ]


def _in_flight(state: TaskState, ev: CheckReported | ArtifactsCaptured, kind: StepKind, what: str) -> tuple[
        Current, Step]:
    """The command in flight and its step, when ``ev`` reports on it; else IllegalEventError."""
    cur = _current(state)
    step = _step(state)
    if step.kind is not kind or ev.command_id != cur.command_id:
        msg = f"task {state.task_id}: {what} {ev.command_id!r} is not the {what.split()[0]} in flight"
        raise IllegalEventError(msg, status=state.status.value, event_type=ev.type)
    return cur, step


def _on_check(state: TaskState, ev: CheckReported) -> Result:
    cur, step = _in_flight(state, ev, StepKind.WAIT, "check report")
    checks = cur.checks + 1
    state = replace(state, current=replace(cur, checks=checks))
    actor = f"check:{step.id}"
    tries: dict[str, Any] = {"deliveries": ev.deliveries, "retries": ev.retries}  # of the check ending it
    if ev.error in VOIDED_APPROVAL:
        return _approval_void(state, ev.at_ms, str(ev.error), ev.detail, {"actor": actor, "output": ev.output})
    if ev.error is not None:
        return _finish(state, ev.at_ms, Outcome.FAILED, actor=actor, reason=ev.error,
                       detail=ev.detail, output=ev.output, **tries)
    # The wait step's result is its last check.
    last: dict[str, Any] = {"check": checks, "passed": ev.passed, "detail": ev.detail}
    if ev.body is not None:
        last["body"] = ev.body
    if ev.passed:
        return _finish(state, ev.at_ms, Outcome.PASSED, actor=actor, detail=ev.detail, output=ev.output,
                       result=last, **tries)
    if checks >= step.max_checks:
        return _finish(
            state, ev.at_ms, Outcome.FAILED, actor=actor, reason="wait_exhausted",
            detail=f"{checks} of {step.max_checks} checks failed; last: {ev.detail}", output=ev.output,
            result=last, **tries,
        )
    base = cur.command_id.rsplit("/check-", 1)[0]
    timer_id = f"{base}/timer-{checks}"
    due = ev.at_ms + int(step.every_seconds * 1000)
    waiting = replace(
        state, status=TaskStatus.WAITING,
        current=replace(cur, checks=checks, timer_id=timer_id, command_id=""),
    )
    return waiting, [
        StartTimer(
            command_id=timer_id, task_id=state.task_id, step=step.id, attempt=cur.attempt,
            timer_id=timer_id, due_at_ms=due, purpose="wait_check",
        )
    ]


def _on_captured(state: TaskState, ev: ArtifactsCaptured) -> Result:
    cur, step = _in_flight(state, ev, StepKind.HUMAN, "capture report")
    if ev.error is not None:
        return _finish(state, ev.at_ms, Outcome.FAILED, actor="statewright:capture", reason=ev.error,
                       detail=ev.detail)
    missing = [name for name in step.artifacts if name not in ev.artifacts]
    if missing:
        msg = f"task {state.task_id}: the artifacts report lacks {', '.join(missing)}"
        raise IllegalEventError(msg, status=state.status.value, event_type=ev.type)
    captured = {name: dict(ev.artifacts[name]) for name in step.artifacts}
    return _await_approval(replace(state, current=replace(cur, captured=captured)), step, ev.at_ms)


REMOTE_TIMEOUT = "timeout"  # a remote attempt was not reported within the step's timeout
HEARTBEAT_TIMEOUT = "heartbeat_timeout"  # the remote agent that claimed it missed a heartbeat


def remote_timers(command_id: str) -> dict[str, str]:
    """The timers a parked remote attempt runs under (timer id -> the reason its firing fails
    the attempt with): the step's timeout, from when it parks, and the claiming agent's
    heartbeat deadline, moved on by each heartbeat. The store writes them (park, claim)."""
    timeout, heartbeat = remote_timer_ids(command_id)
    return {timeout: REMOTE_TIMEOUT, heartbeat: HEARTBEAT_TIMEOUT}


def _remote_deadline(state: TaskState, ev: TimerFired) -> Result:
    """A parked remote attempt's deadline passed: the attempt fails and routes."""
    cur = _current(state)
    step = _step(state)
    reason = remote_timers(cur.command_id).get(ev.timer_id) if step.remote is not None else None
    if reason is None:
        msg = f"task {state.task_id}: timer {ev.timer_id!r} is not a deadline of the attempt in flight"
        raise IllegalEventError(msg, status=state.status.value, event_type=ev.type)
    if reason == REMOTE_TIMEOUT:
        detail = f"no report within the step's timeout ({step.timeout_seconds or 0:g}s)"
    else:
        every = step.remote.heartbeat_seconds if step.remote is not None else 0
        detail = f"the remote agent that claimed it sent no heartbeat for {every:g}s"
    return _finish(state, ev.at_ms, Outcome.FAILED, actor="timer:remote", reason=reason, detail=detail)


def _on_timer(state: TaskState, ev: TimerFired) -> Result:
    cur = _current(state)
    if cur.stuck_timer_id and ev.timer_id == cur.stuck_timer_id:  # at this step too long: tell, once
        step = _step(state)
        quiet = replace(state, current=replace(cur, stuck_timer_id=""))
        return quiet, _notices(quiet, NotifyEvent.STUCK, step, cur.attempt, {
            "stuck_after_seconds": step.stuck_after_seconds, "since_ms": cur.started_at_ms,
        })
    if state.status is TaskStatus.RUNNING:  # else only a remote attempt's deadline is a timer here
        return _remote_deadline(state, ev)
    if not cur.timer_id or ev.timer_id != cur.timer_id:
        msg = f"task {state.task_id}: timer {ev.timer_id!r} is not the timer the task waits on"
        raise IllegalEventError(msg, status=state.status.value, event_type=ev.type)
    if state.status is TaskStatus.AWAITING_APPROVAL:
        return _finish(state, ev.at_ms, Outcome.FAILED, actor="timer:expiry",
                       reason="approval_expired", detail="no approval before the deadline")
    step = _step(state)
    n = cur.checks + 1
    base = cur.timer_id.rsplit("/timer-", 1)[0]
    check_id = f"{base}/check-{n}"
    key = f"{cur.key}/check-{n}" if cur.key else check_id
    running = replace(
        state, status=TaskStatus.RUNNING,
        current=replace(cur, command_id=check_id, timer_id=""),
    )
    return running, [
        RunCheck(
            command_id=check_id, task_id=state.task_id, step=step.id, attempt=cur.attempt,
            check_number=n, idempotency_key=key,
        )
    ]


def _authorise(state: TaskState, ev: ApprovalGranted | ApprovalRejected, verb: str) -> Step:
    cur = _current(state)
    step = _step(state)
    where = f"task {state.task_id}, step {step.id!r}"
    if ev.step and ev.step != step.id:
        raise ApprovalError(f"{where}: the task waits at {step.id!r}, not {ev.step!r}", refusal=Refusal.STALE)
    if not ev.actor:
        raise ApprovalError(f"{where}: an approver name is required")
    if is_machine_actor(ev.actor):
        raise ApprovalError(f"{where}: {ev.actor!r} is an agent or system actor and may never {verb}")
    problem = person_name_problem(ev.actor)
    if problem is not None:
        raise ApprovalError(f"{where}: {problem}")
    role = step.approvers_role or ""
    if role:
        try:
            scope = approver_scope(state, step)
        except RefError as exc:
            raise ApprovalError(f"{where}: the approvers' scope cannot be read ({exc})") from None
        if not holds_role(role, scope, ev.roles):
            needed = f"{role}:{scope_text(scope)}" if scope else role
            raise ApprovalError(
                f"{where}: {ev.actor!r} lacks the role {needed!r} needed to {verb} "
                f"(has: {', '.join(ev.roles) or 'none'})"
            )
    for other in step.separate_from:
        if any(a.actor == ev.actor for a in state.attempts_of(other)):
            raise ApprovalError(
                f"{where}: {ev.actor!r} acted in step {other!r} and may not {verb} it "
                "(separation of duty)"
            )
    if cur.expires_at_ms is not None and ev.at_ms >= cur.expires_at_ms:
        raise ApprovalError(f"{where}: the approval window closed at {when(cur.expires_at_ms)}",
                            refusal=Refusal.EXPIRED)
    if ev.proposal_hash and ev.proposal_hash != cur.proposal_hash:
        raise ApprovalError(
            f"{where}: hash {ev.proposal_hash} is not the current proposal's, {cur.proposal_hash}; "
            "review the current proposal", refusal=Refusal.STALE,
        )
    return step


def approver_scope(state: TaskState, step: Step) -> dict[str, str]:
    """The scope a human step's approvers need, read from the task's state (raises RefError
    when a reference finds nothing)."""
    out: dict[str, str] = {}
    for key, ref in step.approvers_scope.items():
        value = resolve(parse_ref(ref), state.input, state.results)
        out[key] = value if isinstance(value, str) else canonical_json(value)
    return out


def _on_granted(state: TaskState, ev: ApprovalGranted) -> Result:
    _authorise(state, ev, "approve")
    cur = _current(state)
    if ev.proposal_hash != cur.proposal_hash:
        raise ApprovalError(f"task {state.task_id}: an approval must quote the proposal hash", refusal=Refusal.STALE)
    approved = replace(
        state,
        approvals=(*state.approvals, Approval(cur.step, ev.actor, cur.proposal_hash, ev.at_ms, ev.token_id)),
    )
    return _finish(
        approved, ev.at_ms, Outcome.PASSED, actor=ev.actor, detail=ev.comment,
        verdict=_decision(cur, {"approved": True}), artifacts=_shown_texts(cur),
    )


def _decision(cur: Current, verdict: dict[str, Any]) -> dict[str, Any]:
    """A human step's verdict: the decision, the hash it quoted, and the content hashes of
    the artifacts it saw (what later steps are checked against before they run)."""
    verdict["proposal_hash"] = cur.proposal_hash
    if cur.captured:
        verdict["artifacts"] = artifact_hashes(cur.captured)
    return verdict


def _shown_texts(cur: Current) -> dict[str, str]:
    return {name: str(entry.get("text", "")) for name, entry in cur.captured.items()}


def _on_rejected(state: TaskState, ev: ApprovalRejected) -> Result:
    _authorise(state, ev, "reject")
    if not ev.reason_code:
        raise ApprovalError(f"task {state.task_id}: a rejection needs a reason code")
    cur = _current(state)
    return _finish(
        state, ev.at_ms, Outcome.FAILED, actor=ev.actor, reason=ev.reason_code, detail=ev.comment,
        verdict=_decision(cur, {"approved": False, "reason_code": ev.reason_code}),
        artifacts=_shown_texts(cur),
    )


def _operator(state: TaskState, ev: TaskRetried | TaskCancelled, action: str) -> OperatorAction:
    if not ev.actor or not ev.reason:
        msg = f"task {state.task_id}: {action} needs an operator name and a reason"
        raise IllegalEventError(msg, status=state.status.value, event_type=ev.type)
    if isinstance(ev, TaskCancelled) and ev.by_parent:
        if parent_of(state, ev) is None:
            msg = f"task {state.task_id}: {ev.by_parent!r} is not its parent"
            raise IllegalEventError(msg, status=state.status.value, event_type=ev.type)
        problem = None if ev.actor in SYSTEM_ACTORS else person_name_problem(ev.actor)
    else:
        problem = person_name_problem(ev.actor)
    if problem is not None:
        raise IllegalEventError(f"task {state.task_id}: {action} by {problem}", status=state.status.value,
                                event_type=ev.type)
    step = state.halt.step if state.halt else (state.current.step if state.current else "")
    return OperatorAction(action=action, actor=ev.actor, reason=ev.reason, at_ms=ev.at_ms, step=step)


def _on_retried(state: TaskState, ev: TaskRetried) -> Result:
    """Run the halted step again, in a new epoch, under the key of its halted attempt:
    that attempt's effect may have happened, and its target must be able to tell."""
    act = _operator(state, ev, "retry")
    halt = state.halt
    index = state.workflow.index_of(halt.step) if halt else state.step_index
    done = state.attempts_of(state.workflow.steps[index].id)
    retried = replace(
        state, epoch=state.epoch + 1, halt=None,
        operator_actions=(*state.operator_actions, act),
    )
    return _enter(retried, index, ev.at_ms, key=done[-1].key if done else "")


def _on_evidence(state: TaskState, ev: EvidenceAdded) -> Result:
    """A person adds evidence. While an approval is awaited, the proposal is built again
    with it: the hash changes, and an approval quoting the old one is refused."""
    problem = person_name_problem(ev.actor) if ev.actor else "an evidence needs the name of who supplies it"
    if problem is not None:
        raise IllegalEventError(f"task {state.task_id}: evidence by {problem}", status=state.status.value,
                                event_type=ev.type)
    added = replace(state, evidence=(*state.evidence, Evidence(ev.actor, ev.at_ms, dict(ev.evidence), ev.note)))
    if state.status is not TaskStatus.AWAITING_APPROVAL:
        return added, []
    return _propose_again(added, ev.at_ms)


def _propose_again(state: TaskState, at_ms: int) -> Result:
    """The proposal of the approval in flight, built again (its window stays as it was)."""
    cur = _current(state)
    step = _step(state)
    try:
        h = proposal_hash(state, state.workflow.index_of(step.id))
    except RefError as exc:
        return _finish(state, at_ms, Outcome.FAILED, actor="statewright:proposal",
                       reason=MISSING_REFERENCE, detail=str(exc))
    cid = f"{state.task_id}/{step.id}/{cur.attempt}/notify-{len(state.evidence)}"
    state = replace(state, current=replace(cur, proposal_hash=h, command_id=cid))
    return state, [
        RequestApproval(
            command_id=cid, task_id=state.task_id, step=step.id, attempt=cur.attempt,
            proposal_hash=h, role=step.approvers_role or "", expires_at_ms=cur.expires_at_ms,
        ),
        *_notices(state, NotifyEvent.APPROVAL, step, cur.attempt, {
            "proposal_hash": h, "role": step.approvers_role or "", "expires_at_ms": cur.expires_at_ms,
        }, again=len(state.evidence)),
    ]


def _on_notified(state: TaskState, ev: NotificationSent) -> Result:
    """Recorded in the log, and nothing else: a notification never changes the task."""
    if not ev.command_id or not ev.idempotency_key:
        msg = f"task {state.task_id}: a notification report needs its command id and idempotency key"
        raise IllegalEventError(msg, status=state.status.value, event_type=ev.type)
    return state, []


def _on_cancelled(state: TaskState, ev: TaskCancelled) -> Result:
    act = _operator(state, ev, "cancel")
    return replace(
        state, status=TaskStatus.CANCELLED, current=None,
        operator_actions=(*state.operator_actions, act),
    ), []


_HANDLERS: Mapping[str, Callable[[TaskState, Any], Result]] = {
    TaskSubmitted.type: _on_submitted,
    AttemptReported.type: _on_attempt,
    CheckReported.type: _on_check,
    ArtifactsCaptured.type: _on_captured,
    TimerFired.type: _on_timer,
    ApprovalGranted.type: _on_granted,
    ApprovalRejected.type: _on_rejected,
    EvidenceAdded.type: _on_evidence,
    TaskRetried.type: _on_retried,
    TaskCancelled.type: _on_cancelled,
    NotificationSent.type: _on_notified,
    ChildEnded.type: _on_child_ended,
}
