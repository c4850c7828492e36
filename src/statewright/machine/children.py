"""Child tasks: the records a parent and its children keep of each other.

A reducer starts a child by returning a ``StartChild`` command; the engine performs it in the
SAME commit as the transition that asked for it (the child's ``TaskSubmitted`` carries the
parent reference). When a child ends (completed, completed early, halted, cancelled) its
reducer returns ``TellParent``; the engine turns it into a ``ChildEnded`` event on the
parent's stream in the same commit as the child's terminal event. A parent that no longer
wants a child (it was cancelled, or the step that started it ended) returns ``CancelChild``,
which the engine performs in the same commit as a ``TaskCancelled`` of the child. None of
these three is ever an outbox row: nothing between the two streams can be lost or doubled.

Child ids are the parent's id, step, attempt and index: ``PARENT.STEP.ATTEMPT.INDEX``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statewright._record import record
from statewright.machine.commands import CancelChild, StartChild, TellParent
from statewright.machine.events import ChildEnded


@record
class ParentRef:
    """Who started a child: the parent's task id, the step and attempt, and the child's
    index among that attempt's children."""

    task_id: str
    step: str
    attempt: int
    index: int = 0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ParentRef:
        return cls(str(data["task_id"]), str(data["step"]), int(data["attempt"]), int(data.get("index", 0)))

    def as_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "step": self.step, "attempt": self.attempt, "index": self.index}


def child_task_id(parent_id: str, step: str, attempt: int, index: int) -> str:
    return f"{parent_id}.{step}.{attempt}.{index}"


#: The commands the engine performs within the commit instead of writing them to the outbox.
INLINE_COMMANDS: frozenset[str] = frozenset({StartChild.type, CancelChild.type, TellParent.type})


class ChildStatus:
    """A child as its parent sees it: ``running`` until a ChildEnded says how it ended (a
    TaskStatus value: completed, completed_early, halted, cancelled)."""

    RUNNING = "running"
    SUCCEEDED = frozenset({"completed", "completed_early"})


@record
class Child:
    """One child in its parent's state. ``result`` is the child's ``results`` (step ->
    result) when it ended; ``reason``: why a halted or cancelled child stopped."""

    task_id: str
    step: str
    attempt: int
    index: int
    status: str = ChildStatus.RUNNING
    reason: str = ""
    detail: str = ""
    result: Mapping[str, Any] | None = None
    ended_at_ms: int = 0
    cancelling: bool = False  # its CancelChild was asked for (the ChildEnded follows in the same commit)

    @property
    def live(self) -> bool:
        return self.status == ChildStatus.RUNNING

    @property
    def succeeded(self) -> bool:
        return self.status in ChildStatus.SUCCEEDED


def child_ended(tell: TellParent, at_ms: int) -> ChildEnded:
    """The parent's event for a child's ``TellParent``."""
    parent = ParentRef.from_dict(tell.parent)
    return ChildEnded(
        event_id=f"{tell.task_id}:ended:{tell.version}", at_ms=at_ms, child_id=tell.task_id, step=parent.step,
        attempt=parent.attempt, index=parent.index, status=tell.status, reason=tell.reason, detail=tell.detail,
        result=tell.result,
    )
