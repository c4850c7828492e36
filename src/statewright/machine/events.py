"""Events: facts that happened, written to the log under a stable ``type`` name.

Time arrives inside events (``at_ms``, epoch milliseconds); the reducer never reads a clock.
An event's ``event_id`` makes its append idempotent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, fields
from typing import Any, ClassVar

from statewright._errors import IllegalEventError
from statewright._record import record
from statewright.machine._records import record_dict
from statewright.machine.seam import Record


@record
class Event(Record):
    """A fact of a task, appended to its log; ``event_id`` makes the append idempotent."""

    type: ClassVar[str] = ""
    event_id: str
    at_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **record_dict(self)}

    def wire(self) -> dict[str, Any]:
        """``to_dict()`` for serialising at once (the store's log and outbox): the same JSON,
        but the field values are shared, not copied. Read it, never change it."""
        return {"type": self.type, **self.__dict__}


@record
class TaskSubmitted(Event):
    """A task starts. ``priority`` (higher is claimed first) and ``tenant`` (whose fair share
    and limits its steps count against) hold for all its steps."""

    type: ClassVar[str] = "TaskSubmitted"
    input: Mapping[str, Any] = field(default_factory=dict)
    parent: Mapping[str, Any] | None = None  # a child task's parent (machine.children.ParentRef)
    priority: int = 0
    tenant: str = ""


@record
class AttemptReported(Event):
    """An ai or code step's command finished. ``error`` is a reason code when the executor
    produced no usable result (``timeout``, ``exit_status``, ``no_verdict``,
    ``retries_exhausted``, ...). The note is kept, never read as a verdict. ``result`` is a
    code step's output (a JSON object), kept in the task's state as ``results[step]`` (an ai
    step's result is its verdict); events written before it existed load with None."""

    type: ClassVar[str] = "AttemptReported"
    command_id: str = ""
    step: str = ""
    attempt: int = 0
    actor: str = ""
    ok: bool = True
    verdict: Mapping[str, Any] | None = None
    error: str | None = None
    detail: str = ""
    output: str = ""
    artifacts: Mapping[str, str] = field(default_factory=dict)
    cost: Mapping[str, float] = field(default_factory=dict)
    note: str = ""
    result: Mapping[str, Any] | None = None
    deliveries: int = 1  # starts of the command it reports (more than 1: redelivered)
    retries: int = 0  # transient errors retried before this outcome


@record
class CheckReported(Event):
    """One check of a wait step finished. An errored or timed-out check is ``passed=False``.
    ``error`` is a reason code when the check's outcome could not be recorded
    (``handling_error``) or checking again cannot help (``missing_reference``): the wait
    step then fails at once, whatever checks are left. ``body`` is an HTTP check's JSON
    answer (None when there is none), kept in the wait step's result."""

    type: ClassVar[str] = "CheckReported"
    command_id: str = ""
    step: str = ""
    attempt: int = 0
    check_number: int = 0
    passed: bool = False
    detail: str = ""
    output: str = ""
    error: str | None = None
    deliveries: int = 1
    retries: int = 0
    body: Any = None


@record
class ArtifactsCaptured(Event):
    """A human step's declared artifacts were read: ``artifacts`` maps each name to
    ``{"sha256", "bytes", "text"}`` (``text``: the start of the content for the review, cut
    when long or binary; ``base``: the commit a ``diff`` is taken against). ``error`` is a
    reason code when they could not be read (``missing_artifact``, ...)."""

    type: ClassVar[str] = "ArtifactsCaptured"
    command_id: str = ""
    step: str = ""
    attempt: int = 0
    artifacts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    error: str | None = None
    detail: str = ""


@record
class TimerFired(Event):
    """A timer the task set (``timer_id``) came due."""

    type: ClassVar[str] = "TimerFired"
    timer_id: str = ""


@record
class ApprovalGranted(Event):
    """A person holding ``roles`` approved the proposal the step waits on."""

    type: ClassVar[str] = "ApprovalGranted"
    step: str = ""
    actor: str = ""
    roles: tuple[str, ...] = ()
    proposal_hash: str = ""
    comment: str = ""
    token_id: str = ""  # the token the person proved who they are with (never the token)


@record
class ApprovalRejected(Event):
    """A person holding ``roles`` rejected the proposal the step waits on (``reason_code``)."""

    type: ClassVar[str] = "ApprovalRejected"
    step: str = ""
    actor: str = ""
    roles: tuple[str, ...] = ()
    proposal_hash: str = ""
    reason_code: str = ""
    comment: str = ""
    token_id: str = ""


@record
class EvidenceAdded(Event):
    """A person supplied evidence to the task (a JSON object), with a note of what it is. A
    proposal waiting for approval is built again with it, so an approval of the old one is
    refused."""

    type: ClassVar[str] = "EvidenceAdded"
    actor: str = ""
    roles: tuple[str, ...] = ()
    evidence: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""
    token_id: str = ""


@record
class TaskRetried(Event):
    """An operator re-runs the halted step, with a recorded reason."""

    type: ClassVar[str] = "TaskRetried"
    actor: str = ""
    reason: str = ""


@record
class TaskCancelled(Event):
    """The task was cancelled: by ``actor``, or with its parent (``by_parent``)."""

    type: ClassVar[str] = "TaskCancelled"
    actor: str = ""
    reason: str = ""
    by_parent: str = ""  # a child cancelled with its parent, or when the step that started it ended


@record
class NotificationSent(Event):
    """A Notify command ended: ``delivered``, or given up with ``error`` (a reason code:
    ``retries_exhausted``, ``refused``, ``secret_missing``, ``not_configured``,
    ``task_moved_on``, ``notify_error``, ``handling_error``) and ``detail``. It changes
    nothing else in the task: a notification never blocks or fails it. ``target`` is the
    target as shown (kind and host or address)."""

    type: ClassVar[str] = "NotificationSent"
    command_id: str = ""
    step: str = ""
    attempt: int = 0
    event: str = ""
    target: str = ""
    idempotency_key: str = ""
    delivered: bool = False
    error: str | None = None
    detail: str = ""
    tries: int = 1


@record
class ChildEnded(Event):
    """Child ``child_id`` (started by ``step``'s attempt ``attempt``, item ``index``) ended
    with ``status``. Written in the same transaction as the child's terminal event; its
    ``event_id`` is ``CHILD:ended:VERSION``."""

    type: ClassVar[str] = "ChildEnded"
    child_id: str = ""
    step: str = ""
    attempt: int = 0
    index: int = 0
    status: str = ""
    reason: str = ""
    detail: str = ""
    result: Mapping[str, Any] | None = None


EVENT_TYPES: Mapping[str, type[Event]] = {
    cls.type: cls
    for cls in (
        TaskSubmitted,
        AttemptReported,
        CheckReported,
        ArtifactsCaptured,
        TimerFired,
        ApprovalGranted,
        ApprovalRejected,
        EvidenceAdded,
        TaskRetried,
        TaskCancelled,
        NotificationSent,
        ChildEnded,
    )
}


def event_from_dict(data: Mapping[str, Any]) -> Event:
    """Rebuild an event from its logged form."""
    cls = EVENT_TYPES.get(str(data.get("type")))
    if cls is None:
        msg = f"unknown event type {data.get('type')!r}"
        raise IllegalEventError(msg, event_type=str(data.get("type")))
    names = {f.name for f in fields(cls)}
    kwargs = {k: v for k, v in data.items() if k in names}
    if "roles" in kwargs:
        kwargs["roles"] = tuple(kwargs["roles"])
    return cls(**kwargs)
