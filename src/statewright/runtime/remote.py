"""Remote agents: an ai or code step with ``agent: {type: remote, queue: NAME}`` is worked on
another machine, and reported back by task token.

    park       a worker performing the step's RunStep runs nothing: it parks the attempt on
               the queue (store/remote.py), with the step's timeout as a durable timer
    claim      an agent identity allowed for the queue (role ``agent`` or ``agent:queue=NAME``)
               takes the oldest parked attempt: its brief and a fresh task token, given out
               once (the store keeps its sha256); its heartbeat deadline starts
    heartbeat  moves the deadline on; a heartbeat after it is refused
    report     a verdict or a failure (a reason code), screened as every outcome is, then
               reduced: a verdict that breaks the step's schema gets the one repair turn
               (parked again for the queue), and the attempt routes like any other; a code
               step's report is its output (``results[step]``), held to its output_schema
    deadline   a missed heartbeat (``heartbeat_timeout``) or the step's timeout (``timeout``)
               fails the attempt, through the timers every worker fires

A report or heartbeat with a token that is not open (the attempt was reported, its deadline
passed, whether or not a worker has fired its timer yet, or the token is unknown) raises
TaskTokenError and changes nothing. The report is
recorded as the agent's (``remote:NAME``); an agent identity never approves."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from statewright._errors import IllegalEventError, InputError, PermissionDeniedError, TaskTokenError
from statewright._names import AGENT_ROLE, holds_role, queue_name_problem, remote_timer_ids
from statewright._record import record
from statewright._time import when
from statewright.definition.model import StepKind
from statewright.machine.commands import RunStep
from statewright.machine.events import AttemptReported
from statewright.machine.state import Outcome
from statewright.runtime.users import Principal, token_hash
from statewright.store.remote import RemoteRow

if TYPE_CHECKING:
    from statewright.runtime.engine import Applied, Engine

TASK_TOKEN_PREFIX = "swq_"
REMOTE_ACTOR = "remote:"  # a remote agent's reports are recorded as remote:NAME
MAX_TOKEN_CHARS = 100


@record
class RemoteWork:
    """One claimed attempt, as its agent receives it. ``token`` is shown this once."""

    token: str
    task_id: str
    step: str
    attempt: int
    idempotency_key: str
    brief: Mapping[str, Any]
    output_schema: Mapping[str, Any] | None
    heartbeat_seconds: float
    timeout_seconds: float | None
    deadline_at_ms: int | None  # when the step's timeout fails the attempt, if it has one

    def to_dict(self) -> dict[str, Any]:
        return {
            "token": self.token, "task_id": self.task_id, "step": self.step, "attempt": self.attempt,
            "idempotency_key": self.idempotency_key, "brief": dict(self.brief),
            "output_schema": dict(self.output_schema) if self.output_schema is not None else None,
            "heartbeat_seconds": self.heartbeat_seconds, "timeout_seconds": self.timeout_seconds,
            "deadline_at_ms": self.deadline_at_ms,
        }


@record
class RemoteOutcome:
    """What a report did: the task's status after it, and the repair problem when the
    verdict broke the schema and the attempt went back to the queue for its repair turn."""

    task_id: str
    status: str
    repair: str | None = None
    reason: str | None = None  # the attempt's failure reason, when the report failed it

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "status": self.status, "repair": self.repair, "reason": self.reason}


class RemoteAgents:
    """The remote-agent acts of one engine; each takes the Principal that
    ``engine.users.authenticate(token)`` returned and authenticates it again."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.store = engine.store

    def claim(self, queue: str, by: Principal) -> RemoteWork | None:
        """The oldest attempt parked on ``queue``, now ``by``'s; None when none waits."""
        who = self.engine.users.check(by, act="claim remote work")
        problem = queue_name_problem(queue)
        if problem is not None:
            raise InputError(problem)
        if not holds_role(AGENT_ROLE, {"queue": queue}, who.roles):
            raise PermissionDeniedError(
                f"{who.name!r} lacks the role '{AGENT_ROLE}' for queue {queue!r} "
                f"(grant '{AGENT_ROLE}:queue={queue}'; has: {', '.join(who.roles) or 'none'})"
            )
        token = f"{TASK_TOKEN_PREFIX}{secrets.token_urlsafe(32)}"
        row = self.store.claim_remote(queue, who.name, token_hash(token), self.engine.clock.now_ms())
        if row is None:
            return None
        body = row.body
        st = self.engine.state(row.task_id)
        step = st.workflow.step(str(body.get("step")))
        timeout = step.timeout_seconds
        return RemoteWork(
            token=token, task_id=row.task_id, step=step.id, attempt=int(body.get("attempt", 1)),
            idempotency_key=str(body.get("idempotency_key", row.command_id)), brief=dict(body.get("brief") or {}),
            output_schema=step.output_schema, heartbeat_seconds=row.heartbeat_ms / 1000, timeout_seconds=timeout,
            deadline_at_ms=row.parked_at_ms + int(timeout * 1000) if timeout is not None else None,
        )

    def heartbeat(self, token: object, by: Principal) -> int:
        """Move the heartbeat deadline of ``token``'s attempt on; returns the new deadline
        (epoch milliseconds)."""
        who = self.engine.users.check(by, act="send a heartbeat")
        row = self._open(token, who, "heartbeat")
        now = self.engine.clock.now_ms()
        if self.store.heartbeat_remote(token_hash(str(token)), now) is None:
            raise TaskTokenError(
                f"task {row.task_id}: the heartbeat came after its deadline; the attempt fails with heartbeat_timeout"
            )
        return now + row.heartbeat_ms

    def report(
        self, token: object, by: Principal, *, verdict: Mapping[str, Any] | None = None, error: str | None = None,
        detail: str = "", note: str = "",
    ) -> RemoteOutcome:
        """Report ``token``'s attempt: a verdict, or a failure with a reason code."""
        from statewright.executors.base import Reason
        from statewright.runtime import screen

        who = self.engine.users.check(by, act="report remote work")
        if verdict is not None and not isinstance(verdict, Mapping):
            raise InputError(f"a verdict must be a JSON object, got {type(verdict).__name__}")
        if error is not None and error not in Reason.__members__.values():
            raise InputError(f"error {error!r} is not a reason code; use one of: "
                             f"{', '.join(sorted(r.value for r in Reason))}")
        if not isinstance(detail, str) or not isinstance(note, str):
            raise InputError("detail and note must be text")
        row = self._open(token, who, "report")
        st = self.engine.state(row.task_id)
        step = st.workflow.step(str(row.body.get("step")))
        if error == Reason.NO_VERDICT:
            error = Reason.INVALID_VERDICT.value  # the reducer grants one repair turn, as for a command agent
        value = dict(verdict) if verdict is not None else None
        code = step.kind is StepKind.CODE  # a code step's report is its output, checked as a code step's is
        ev = AttemptReported(
            event_id=f"{row.command_id}:result", at_ms=self.engine.clock.now_ms(), command_id=row.command_id,
            step=step.id, attempt=int(row.body.get("attempt", 1)), actor=f"{REMOTE_ACTOR}{who.name}",
            ok=error is None, verdict=None if code else value, result=value if code else None, error=error,
            detail=detail, output=detail, note=note,
        )
        event = screen.screen(ev, step.result_limit_bytes)
        try:
            applied = self.engine.apply(row.task_id, event, state=st)
        except IllegalEventError:
            raise TaskTokenError(f"task {row.task_id}: the attempt was already closed; the report changed nothing") \
                from None
        if applied.duplicate:
            raise TaskTokenError(f"task {row.task_id}: the attempt was reported already; the report changed nothing")
        return _outcome(applied, row.command_id)

    def _open(self, token: object, who: Principal, act: str) -> RemoteRow:
        """The open attempt ``token`` names, claimed by ``who``, before its deadlines: a
        deadline that passed has failed the attempt, whether or not a worker fired its timer
        yet (the timer does; a report that raced it is refused by the version)."""
        if not isinstance(token, str) or not token.startswith(TASK_TOKEN_PREFIX) or len(token) > MAX_TOKEN_CHARS:
            raise InputError(f"that is not a task token ({TASK_TOKEN_PREFIX}...); a claim gives one out")
        row = self.store.remote_by_token(token_hash(token))
        if row is None:
            raise TaskTokenError("the task token is not open: its attempt was reported, its deadline passed, "
                                 "or it was never given out; nothing changed")
        if row.agent != who.name:
            raise PermissionDeniedError(f"{who.name!r} did not claim this attempt; only its agent may act on it")
        now = self.engine.clock.now_ms()
        timeout_id, heartbeat_id = remote_timer_ids(row.command_id)
        reasons = {timeout_id: "timeout", heartbeat_id: "heartbeat_timeout"}
        passed = [t for t in self.store.timers(row.task_id) if t["timer_id"] in reasons and t["due_at_ms"] <= now]
        if passed:
            first = min(passed, key=lambda t: int(t["due_at_ms"]))
            raise TaskTokenError(
                f"task {row.task_id}: the {act} came after its deadline ({when(first['due_at_ms'])}); the attempt "
                f"fails with {reasons[first['timer_id']]}; nothing changed"
            )
        return row


def _outcome(applied: Applied, command_id: str) -> RemoteOutcome:
    st = applied.state
    repair = next((c.repair_error for c in applied.commands
                   if isinstance(c, RunStep) and c.command_id == f"{command_id}/repair"), None)
    if repair is not None:
        return RemoteOutcome(st.task_id, st.status.value, repair=repair)
    last = st.attempts[-1] if st.attempts else None
    failed = last is not None and last.outcome is not Outcome.PASSED
    return RemoteOutcome(st.task_id, st.status.value, reason=(last.reason or None) if failed and last else None)
