"""Commits that span tasks: a parent with the children it starts or cancels, a child with
the parent it tells of its end, written in ONE store transaction (``Store.append_all``).

The reducers say what they need as commands (``machine.children``); a ``Unit`` performs
them before anything is written: ``StartChild`` becomes the child's ``TaskSubmitted`` (its
parent recorded), ``CancelChild`` the child's ``TaskCancelled``, ``TellParent`` the parent's
``ChildEnded`` (or, when the parent is a loop run whose pass the child runs, the run's
``PassEnded``, moved through the loop's reducer and written as a line of its record). Each of
those transitions may ask for more (a child that halts at once tells its parent, whose map
step starts the next child), so the unit works until nothing is left.
Either all of it commits or none of it: a parent never misses a child's end, and a child
never outlives the cancel of its parent."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from statewright._errors import LoopInvariantError
from statewright._names import person_name_problem
from statewright.definition.model import Workflow
from statewright.machine.children import INLINE_COMMANDS, ParentRef, child_ended
from statewright.machine.commands import CancelChild, Command, StartChild, TellParent
from statewright.machine.events import Event, TaskCancelled, TaskSubmitted
from statewright.machine.state import TaskState, TaskStatus, new_task, projection
from statewright.machine.task import transition
from statewright.runtime.outbox import remote_closed, to_new_commands
from statewright.store.base import AppendRequest, NewCommand, StoredTask

if TYPE_CHECKING:
    from statewright.machine.loop.events import LoopCommand


class Tasks(Protocol):
    """What a unit reads through the engine: a task's state (``unit_state``: the one the last
    unit that touched it left, when the engine still holds it; the commit's version check
    refuses a stale one) and a child's workflow."""

    def unit_state(self, task_id: str) -> TaskState: ...

    def state(self, task_id: str) -> TaskState:
        """The task's state as stored now."""
        ...

    def child_workflow(self, content_hash: str, name: str) -> Workflow: ...

    def loop_parent(self, parent_id: str) -> StoredTask | None:
        """The stored loop run ``parent_id`` names, or None when the parent is a task."""
        ...


def spans_tasks(commands: Sequence[Command]) -> bool:
    """Whether a transition's commands reach other tasks (and so need a Unit)."""
    return any(c.type in INLINE_COMMANDS for c in commands)


class Unit:
    """The appends of one commit across tasks, in order; ``requests`` is what to write."""

    def __init__(self, engine: Tasks, now_ms: int, *, fresh: bool = False) -> None:
        self.engine = engine
        self.now_ms = now_ms
        self.fresh = fresh  # read the other tasks from the store, not from what earlier units left
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
            to_new_commands(commands, self.now_ms, new), terminal=new.terminal,
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
        if known is not None:
            return known
        return self.engine.state(task_id) if self.fresh else self.engine.unit_state(task_id)

    def _start(self, parent: TaskState, c: StartChild, at_ms: int) -> None:
        wf = self.engine.child_workflow(c.workflow_hash, c.workflow)
        ref = ParentRef(parent.task_id, c.step, c.attempt, c.index)
        ev = TaskSubmitted(event_id=f"{c.child_id}:submitted", at_ms=at_ms, input=dict(c.input), parent=ref.as_dict(),
                           priority=parent.priority, tenant=parent.tenant)  # a child runs as its parent does
        new, cmds = transition(new_task(c.child_id, wf), ev)
        self.add(None, ev, new, cmds, workflow=wf.name, workflow_hash=wf.content_hash, parent_id=parent.task_id)

    def _cancel(self, parent: TaskState, c: CancelChild, at_ms: int) -> None:
        child = self.state(c.child_id)
        if child.status in (TaskStatus.COMPLETED, TaskStatus.COMPLETED_EARLY, TaskStatus.CANCELLED):
            return  # it ended first: its ChildEnded is in the parent's log already
        ev = TaskCancelled(event_id=f"{c.child_id}:cancelled", at_ms=at_ms, actor=c.actor, reason=c.reason,
                           by_parent=parent.task_id)
        new, cmds = transition(child, ev)
        self.add(child, ev, new, cmds)

    def _tell(self, c: TellParent, at_ms: int) -> None:
        run = self.engine.loop_parent(str(c.parent["task_id"]))
        if run is not None:
            self.requests.append(pass_ended(run, c, self.states.get(c.task_id), at_ms))
            return
        parent = self.state(str(c.parent["task_id"]))
        ev = child_ended(c, at_ms)
        new, cmds = transition(parent, ev)
        self.add(parent, ev, new, cmds)


def pass_ended(run: StoredTask, tell: TellParent, child: TaskState | None, at_ms: int) -> AppendRequest:
    """The loop run's line for the end of the child task that runs one of its passes: the run's
    ``PassEnded`` (the pass's item and attempt are the child's parent reference) moved through
    the loop's reducer, appended at the run's stored version, as ``LoopStore.append`` does. A
    run that slept on the task gets a ``WakeRun`` row in the outbox, in the same commit."""
    from statewright.machine.loop.codec import line_body, run_projection, state_from_dict
    from statewright.machine.loop.events import PassEnded
    from statewright.machine.loop.reducer import transition as loop_transition

    ref = ParentRef.from_dict(tell.parent)
    cost = child.cost if child is not None else {}
    ev = PassEnded(
        ref.step, ref.attempt, tell.task_id, tell.status, at_ms, reason=tell.reason, detail=tell.detail,
        tokens=int(cost.get("tokens_in", 0) + cost.get("tokens_out", 0)), money_usd=float(cost.get("money_usd", 0.0)),
        actors=people_of(child), event_id=f"{tell.task_id}:ended:{tell.version}",
    )
    stored = run.state
    step = loop_transition(state_from_dict(stored["state"]), ev)
    if step.line is None:
        raise LoopInvariantError(f"loop run {run.task_id}: {ev.type} wrote no line")
    lines = int(stored.get("lines", run.version - 1)) + 1
    wake = wake_rows(run.task_id, ev.event_id, step.commands, at_ms, lines)  # a worker claims it, drives the run on
    return AppendRequest(
        run.task_id, run.version, line_body(ev, step.line, step.commands), run_projection(step.state,
        stored.get("meta") or {}, lines), wake, terminal=step.state.status.is_terminal,
    )


def wake_rows(stream: str, event_id: str, commands: Sequence[Command | LoopCommand], at_ms: int,
              line_no: int) -> list[NewCommand]:
    """The outbox rows of the ``WakeRun`` commands a loop run's line ``line_no`` asks for (its
    event is ``event_id``, at ``at_ms``): claimable at once, or a gate's timer not before its
    ``due_at_ms``. Each names the line (``after_line``): a run that moved on past it since
    (a 'loop run' took it up) is not woken by it."""
    from statewright.machine.loop.codec import command_to_dict
    from statewright.machine.loop.events import WakeRun

    return [NewCommand(f"{stream}:wake:{event_id}", c.type, {**command_to_dict(c), "after_line": line_no},
                       c.due_at_ms if c.due_at_ms is not None else at_ms)
            for c in commands if isinstance(c, WakeRun)]


def people_of(task: TaskState | None) -> tuple[str, ...]:
    """The people (not agents, not the system) who acted in ``task``'s attempts, sorted."""
    if task is None:
        return ()
    return tuple(sorted({a.actor for a in task.attempts if a.actor and person_name_problem(a.actor) is None}))
