"""Commits that span tasks: a parent with the children it starts or cancels, a child with
the parent it tells of its end, written in ONE store transaction (``Store.append_all``).

The reducers say what they need as commands (``machine.children``); a ``Unit`` performs
them before anything is written: ``StartChild`` becomes the child's ``TaskSubmitted`` (its
parent recorded), ``CancelChild`` the child's ``TaskCancelled``, ``TellParent`` the parent's
``ChildEnded``. Each of those transitions may ask for more (a child that halts at once tells
its parent, whose map step starts the next child), so the unit works until nothing is left.
Either all of it commits or none of it: a parent never misses a child's end, and a child
never outlives the cancel of its parent."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

from statewright.definition.model import Workflow
from statewright.machine.children import INLINE_COMMANDS, ParentRef, child_ended
from statewright.machine.commands import CancelChild, Command, StartChild, TellParent
from statewright.machine.events import Event, TaskCancelled, TaskSubmitted
from statewright.machine.state import TaskState, TaskStatus, new_task, projection
from statewright.machine.task import transition
from statewright.runtime.outbox import remote_closed, to_new_commands
from statewright.store.base import AppendRequest


class Tasks(Protocol):
    """What a unit reads through the engine: a task's state (``unit_state``: the one the last
    unit that touched it left, when the engine still holds it; the commit's version check
    refuses a stale one) and a child's workflow."""

    def unit_state(self, task_id: str) -> TaskState: ...

    def child_workflow(self, content_hash: str, name: str) -> Workflow: ...


def spans_tasks(commands: Sequence[Command]) -> bool:
    """Whether a transition's commands reach other tasks (and so need a Unit)."""
    return any(c.type in INLINE_COMMANDS for c in commands)


def inherited_from_parent(parent: TaskState) -> dict[str, Any]:
    """What a child's submission takes from its parent besides the parent reference (the
    place for a parent's priority or tenant): extra fields of the child's first append."""
    return {}


class Unit:
    """The appends of one commit across tasks, in order; ``requests`` is what to write."""

    def __init__(self, engine: Tasks, now_ms: int) -> None:
        self.engine = engine
        self.now_ms = now_ms
        self.requests: list[AppendRequest] = []
        self.states: dict[str, TaskState] = {}
        self.commands: list[tuple[str, list[Command]]] = []  # per append: the task and its commands
        self._todo: deque[tuple[TaskState, list[Command], int]] = deque()

    def add(self, before: TaskState | None, event: Event, new: TaskState, commands: list[Command],
            **fields: Any) -> None:
        """One append: ``event`` took the task from ``before`` (None: a new task) to ``new``."""
        self.states[new.task_id] = new
        self.requests.append(AppendRequest(
            new.task_id, before.version if before is not None else 0, event.wire(), projection(new),
            to_new_commands(commands, self.now_ms), terminal=new.terminal,
            complete_remote=remote_closed(before, new) if before is not None else None, **fields,
        ))
        self.commands.append((new.task_id, commands))
        self._todo.append((new, commands, event.at_ms))

    def run(self) -> Unit:
        """Perform every command that reaches another task, and what those lead to."""
        while self._todo:
            owner, commands, at_ms = self._todo.popleft()
            for c in commands:
                if isinstance(c, StartChild):
                    self._start(owner, c, at_ms)
                elif isinstance(c, CancelChild):
                    self._cancel(owner, c, at_ms)
                elif isinstance(c, TellParent):
                    self._tell(c, at_ms)
        return self

    def state(self, task_id: str) -> TaskState:
        """The task as this unit leaves it so far (the store's, before the unit touched it)."""
        known = self.states.get(task_id)
        return known if known is not None else self.engine.unit_state(task_id)

    def _start(self, parent: TaskState, c: StartChild, at_ms: int) -> None:
        wf = self.engine.child_workflow(c.workflow_hash, c.workflow)
        ref = ParentRef(parent.task_id, c.step, c.attempt, c.index)
        ev = TaskSubmitted(event_id=f"{c.child_id}:submitted", at_ms=at_ms, input=dict(c.input), parent=ref.as_dict())
        new, cmds = transition(new_task(c.child_id, wf), ev)
        self.add(None, ev, new, cmds, workflow=wf.name, workflow_hash=wf.content_hash, parent_id=parent.task_id,
                 **inherited_from_parent(parent))

    def _cancel(self, parent: TaskState, c: CancelChild, at_ms: int) -> None:
        child = self.state(c.child_id)
        if child.status in (TaskStatus.COMPLETED, TaskStatus.COMPLETED_EARLY, TaskStatus.CANCELLED):
            return  # it ended first: its ChildEnded is in the parent's log already
        ev = TaskCancelled(event_id=f"{c.child_id}:cancelled", at_ms=at_ms, actor=c.actor, reason=c.reason,
                           by_parent=parent.task_id)
        new, cmds = transition(child, ev)
        self.add(child, ev, new, cmds)

    def _tell(self, c: TellParent, at_ms: int) -> None:
        parent = self.state(str(c.parent["task_id"]))
        ev = child_ended(c, at_ms)
        new, cmds = transition(parent, ev)
        self.add(parent, ev, new, cmds)
