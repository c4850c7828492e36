"""What a committed transition leaves to do: its commands as outbox and timer rows, and the
remote attempt it closes. Shared by the engine's single appends and its units (children.py)."""

from __future__ import annotations

from collections.abc import Sequence

from statewright.machine.children import INLINE_COMMANDS
from statewright.machine.commands import Command, RequestApproval, StartTimer
from statewright.machine.state import TaskState
from statewright.store.base import NewCommand


def to_new_commands(commands: Sequence[Command], now_ms: int) -> list[NewCommand]:
    """The outbox rows and timers of ``commands``. A RequestApproval is not stored: telling
    the approvers is the work of the step's Notify commands, and the engine announces the
    wait in its log once the transition is committed (``announce``). Commands that reach other
    tasks (``INLINE_COMMANDS``) are performed inside the commit, never stored."""
    out = []
    for c in commands:
        if isinstance(c, RequestApproval) or c.type in INLINE_COMMANDS:
            continue
        if isinstance(c, StartTimer):
            out.append(NewCommand(c.timer_id, "TimerFired", {}, c.due_at_ms, timer=True, purpose=c.purpose))
        else:
            out.append(NewCommand(c.command_id, c.type, c.wire(), now_ms))
    return out


def remote_closed(old: TaskState, new: TaskState) -> str | None:
    """The command id of the remote attempt a transition from ``old`` to ``new`` ends (a
    report, a deadline, a repair turn, a cancel): its parked row and timers go with it."""
    cur = old.current
    if cur is None or not cur.command_id or (new.current is not None and new.current.command_id == cur.command_id):
        return None
    return cur.command_id if old.workflow.step(cur.step).remote is not None else None
