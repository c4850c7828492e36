"""What a committed transition leaves to do: its commands as outbox and timer rows, and the
remote attempt it closes. Shared by the engine's single appends and its units (children.py)."""

from __future__ import annotations

from collections.abc import Sequence

from statewright.definition.model import Step, Workflow
from statewright.machine.children import INLINE_COMMANDS
from statewright.machine.commands import Command, RequestApproval, StartTimer
from statewright.machine.state import TaskState
from statewright.store.base import NewCommand


def to_new_commands(commands: Sequence[Command], now_ms: int, state: TaskState | None = None) -> list[NewCommand]:
    """The outbox rows and timers of ``commands`` (made by a transition into ``state``): each
    with the task's priority and tenant, a step's with the gates of its limits. A
    RequestApproval is not stored: telling the approvers is the work of the step's Notify
    commands, and the engine announces the wait in its log once the transition is committed
    (``announce``). Commands that reach other tasks (``INLINE_COMMANDS``) are performed
    inside the commit, never stored."""
    out = []
    priority, tenant = (state.priority, state.tenant) if state is not None else (0, "")
    for c in commands:
        if isinstance(c, RequestApproval) or c.type in INLINE_COMMANDS:
            continue
        if isinstance(c, StartTimer):
            out.append(NewCommand(c.timer_id, "TimerFired", {}, c.due_at_ms, timer=True, purpose=c.purpose))
        else:
            gates = step_gates(state.workflow, c.step) if state is not None and c.type in _GATED else None
            out.append(NewCommand(c.command_id, c.type, c.wire(), now_ms, priority=priority, tenant=tenant,
                                  gates=gates))
    return out


_GATED = frozenset({"RunStep", "RunCheck"})  # the commands that perform a step's work
_STEP_GATES: dict[tuple[str, str], str | None] = {}


def step_gates(workflow: Workflow, step_id: str) -> str | None:
    """The gates (store/admission.py) a step's work passes: the workflow's and the step's
    concurrency and the named limits it draws on; None when it has none."""
    key = (workflow.content_hash, step_id)
    if key not in _STEP_GATES:
        try:
            step = workflow.step(step_id)
        except KeyError:
            return None
        if len(_STEP_GATES) > 10_000:
            _STEP_GATES.clear()
        _STEP_GATES[key] = _gates_json(workflow, step)
    return _STEP_GATES[key]


def _gates_json(workflow: Workflow, step: Step) -> str | None:
    if workflow.concurrency is None and step.concurrency is None and not step.limits:
        return None  # admission is imported for the steps that have gates only
    from statewright.store.admission import Gate, gates_json

    gates = []
    if workflow.concurrency is not None:
        gates.append(Gate(f"workflow:{workflow.name}", workflow.concurrency))
    if step.concurrency is not None:
        gates.append(Gate(f"step:{workflow.name}/{step.id}", step.concurrency))
    gates += [Gate(f"limit:{name}") for name in step.limits]
    return gates_json(gates)


def remote_closed(old: TaskState, new: TaskState) -> str | None:
    """The command id of the remote attempt a transition from ``old`` to ``new`` ends (a
    report, a deadline, a repair turn, a cancel): its parked row and timers go with it."""
    cur = old.current
    if cur is None or not cur.command_id or (new.current is not None and new.current.command_id == cur.command_id):
        return None
    return cur.command_id if old.workflow.step(cur.step).remote is not None else None
