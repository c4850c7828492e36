"""Commands: requests the reducer makes, performed by workers after the transition commits.

Ids are deterministic (task, step, attempt), so a redelivered command keeps its
idempotency key and a duplicate report is a duplicate event."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, fields
from typing import Any, ClassVar

from statewright._record import record
from statewright.machine._records import record_dict
from statewright.machine.seam import Record


@record
class Command(Record):
    """A request of the task machine, performed once the transition that asked for it is stored."""

    type: ClassVar[str] = ""
    command_id: str
    task_id: str
    step: str
    attempt: int

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **record_dict(self)}

    def wire(self) -> dict[str, Any]:
        """``to_dict()`` for serialising at once (the store's log and outbox): the same JSON,
        but the field values are shared, not copied. Read it, never change it."""
        return {"type": self.type, **self.__dict__}


@record
class RunStep(Command):
    """Run one attempt of an ai or code step."""

    type: ClassVar[str] = "RunStep"
    kind: str = ""
    idempotency_key: str = ""
    brief: Mapping[str, Any] = field(default_factory=dict)
    repair_error: str | None = None


@record
class RunCheck(Command):
    """Run check number ``check_number`` of a wait step."""

    type: ClassVar[str] = "RunCheck"
    check_number: int = 1
    idempotency_key: str = ""


@record
class CaptureArtifacts(Command):
    """Read a human step's declared artifacts and report their content hashes, before the
    proposal is built and shown."""

    type: ClassVar[str] = "CaptureArtifacts"
    artifacts: tuple[str, ...] = ()


@record
class RequestApproval(Command):
    """A proposal waits for its approvers. The engine logs it when the transition commits;
    the step's Notify commands tell the people (it is never an outbox row)."""

    type: ClassVar[str] = "RequestApproval"
    proposal_hash: str = ""
    role: str = ""
    expires_at_ms: int | None = None


@record
class StartTimer(Command):
    """A durable timer: the store keeps it as a row; a worker fires it as TimerFired."""

    type: ClassVar[str] = "StartTimer"
    timer_id: str = ""
    due_at_ms: int = 0
    purpose: str = ""


@record
class Notify(Command):
    """Tell one target (``NotifyTarget.to_dict()``) of ``event`` (``NotifyEvent``): a task
    waits for approval, halted, or is stuck. ``idempotency_key`` is TASK/EVENT/TARGET: a
    receiver that sees it twice has seen one notification. ``facts`` are what the message
    says (status, step, reason, proposal hash, ...); the worker writes the message and the
    review link, and reads any secret from its own environment."""

    type: ClassVar[str] = "Notify"
    event: str = ""
    target: Mapping[str, str] = field(default_factory=dict)
    idempotency_key: str = ""
    facts: Mapping[str, Any] = field(default_factory=dict)


@record
class SyncLabels(Command):
    """Make the labels of the task's issue or pull request in ``repo`` show its state as of
    ``version`` (``machine.labels``): remove the stale ones, add the current. A worker reads
    the task's state again when it performs it, so an old command never sets old labels."""

    type: ClassVar[str] = "SyncLabels"
    idempotency_key: str = ""
    repo: str = ""
    labels: tuple[str, ...] = ()
    version: int = 0


@record
class StartChild(Command):
    """Start task ``child_id`` of the workflow ``workflow_hash`` (or, when empty, the latest
    registered workflow named ``workflow``) on ``input``; ``task_id``, ``step`` and
    ``attempt`` are the parent's."""

    type: ClassVar[str] = "StartChild"
    child_id: str = ""
    index: int = 0
    workflow: str = ""
    workflow_hash: str = ""
    input: Mapping[str, Any] = field(default_factory=dict)


@record
class CancelChild(Command):
    """Cancel the live child ``child_id``: its parent was cancelled by ``actor``, or the
    parent's step that started it ended (``actor`` is then ``statewright:map``)."""

    type: ClassVar[str] = "CancelChild"
    child_id: str = ""
    actor: str = ""
    reason: str = ""


@record
class TellParent(Command):
    """The child ``task_id`` ended: append ChildEnded to its parent (``parent``)."""

    type: ClassVar[str] = "TellParent"
    parent: Mapping[str, Any] = field(default_factory=dict)
    status: str = ""
    reason: str = ""
    detail: str = ""
    result: Mapping[str, Any] | None = None
    version: int = 0  # the child's version that ended it: names the parent's event


COMMAND_TYPES: Mapping[str, type[Command]] = {
    cls.type: cls
    for cls in (RunStep, RunCheck, CaptureArtifacts, RequestApproval, StartTimer, Notify, SyncLabels, StartChild,
                CancelChild, TellParent)
}


def command_from_dict(data: Mapping[str, Any]) -> Command:
    cls = COMMAND_TYPES[str(data["type"])]
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})
