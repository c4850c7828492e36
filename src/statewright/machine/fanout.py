"""Map steps and the bookkeeping of child tasks, for the task reducer (pure: no I/O).

A map step resolves its ``items`` list from the task's state, starts a child task per item
(at most ``max_concurrency`` at once), starts the next one as each child ends, and ends when
all have ended (passed: their results gathered in item order) or when more have failed than
it tolerates (failed). Children still running when the step or the task ends are cancelled."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statewright._record import record
from statewright.definition.model import Step
from statewright.machine._records import replace
from statewright.machine.children import Child, ChildStatus, ParentRef, child_task_id
from statewright.machine.commands import CancelChild, Command, StartChild, TellParent
from statewright.machine.events import ChildEnded, Event, TaskCancelled
from statewright.machine.paths import RefError, parse_ref, resolve
from statewright.machine.state import TERMINAL, TaskState, TaskStatus

MAP_ACTOR = "statewright:map"
LOOP_ACTOR = "statewright:loop"  # a loop run that stopped or gave up the pass its child task runs
SYSTEM_ACTORS = frozenset({MAP_ACTOR, LOOP_ACTOR})  # who may cancel a child for its parent
ITEMS_NOT_A_LIST = "items_not_a_list"  # a map step's items reference found something else
MAP_FAILURES = "map_failures"  # more children failed than the step tolerates
_STILL_OR_WELL = frozenset({ChildStatus.RUNNING, *ChildStatus.SUCCEEDED})  # not (yet) a failure


class ItemsError(ValueError):
    """A map step's items cannot be read: ``reason`` is the attempt's reason code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def map_items(state: TaskState, step: Step) -> list[Any]:
    """The list a map step works on; ItemsError when the reference finds nothing or finds
    something that is not a list."""
    spec = step.map
    if spec is None:
        raise ItemsError(ITEMS_NOT_A_LIST, f"step {step.id!r} is not a map step")
    try:
        value = resolve(parse_ref(spec.items), state.input, state.results)
    except RefError as exc:
        raise ItemsError("missing_reference", str(exc)) from None
    if not isinstance(value, list):
        kind = "an object" if isinstance(value, Mapping) else type(value).__name__
        raise ItemsError(ITEMS_NOT_A_LIST, f"items {spec.items} is {kind}, not a list")
    return value


def children_of(state: TaskState, step: str, attempt: int) -> list[Child]:
    return [c for c in state.children if c.step == step and c.attempt == attempt]


def start_more(state: TaskState, step: Step, attempt: int, items: list[Any]) -> tuple[TaskState, list[Command]]:
    """Start children for the next items while fewer than ``max_concurrency`` run."""
    spec = step.map
    if spec is None:
        return state, []
    mine = children_of(state, step.id, attempt)
    live = sum(c.live for c in mine)
    started = len(mine)
    new: list[Child] = []
    cmds: list[Command] = []
    while started < len(items) and live < spec.max_concurrency:
        cid = child_task_id(state.task_id, step.id, attempt, started)
        new.append(Child(task_id=cid, step=step.id, attempt=attempt, index=started))
        cmds.append(StartChild(
            command_id=f"{state.task_id}/{step.id}/{attempt}/child-{started}", task_id=state.task_id,
            step=step.id, attempt=attempt, child_id=cid, index=started, workflow=spec.workflow,
            workflow_hash=spec.workflow_hash, input={"item": items[started], "index": started},
        ))
        started += 1
        live += 1
    return replace(state, children=(*state.children, *new)), cmds


@record
class MapEnd:
    """How a map step's attempt ends: ``passed``, with the gathered ``result``, or failed
    with ``reason`` and ``detail``."""

    passed: bool
    result: Mapping[str, Any]
    reason: str = ""
    detail: str = ""


def map_end(state: TaskState, step: Step, attempt: int, n_items: int) -> MapEnd | None:
    """The end of a map step's attempt once its children say so; None while it goes on."""
    spec = step.map
    if spec is None:
        return None
    mine = children_of(state, step.id, attempt)
    failed = [c for c in mine if c.status not in _STILL_OR_WELL]
    tolerated = spec.tolerated(n_items)
    if len(failed) > tolerated:
        first = failed[0]
        why = f"; first: item {first.index} ({first.task_id}) {first.status}"
        why += f": {first.reason}" if first.reason else ""
        detail = f"{len(failed)} of {n_items} children failed, {tolerated} tolerated{why}"
        return MapEnd(False, gather(mine, n_items), MAP_FAILURES, detail)
    if len(mine) == n_items and all(c.status != ChildStatus.RUNNING for c in mine):
        return MapEnd(True, gather(mine, n_items))
    return None


def gather(children: list[Child], n_items: int) -> dict[str, Any]:
    """A map step's result: each child's results in item order (None for one that did not
    complete), how many succeeded and failed, and each failure."""
    by_index = {c.index: c for c in children}
    results = [by_index[i].result if i in by_index and by_index[i].succeeded else None for i in range(n_items)]
    failures = [
        {"index": c.index, "task_id": c.task_id, "status": c.status, "reason": c.reason}
        for c in children if not c.live and not c.succeeded
    ]
    return {
        "results": results, "succeeded": sum(c.succeeded for c in children), "failed": len(failures),
        "failures": failures,
    }


def record_end(state: TaskState, ev: ChildEnded) -> TaskState | None:
    """The state with the child's end recorded; None when ``ev`` names no child of this task."""
    for i, c in enumerate(state.children):
        if c.task_id == ev.child_id and c.step == ev.step and c.attempt == ev.attempt:
            ended = replace(c, status=ev.status, reason=ev.reason, detail=ev.detail,
                            result=dict(ev.result) if ev.result is not None else None, ended_at_ms=ev.at_ms)
            return replace(state, children=(*state.children[:i], ended, *state.children[i + 1:]))
    return None


def cascade(old: TaskState, new: TaskState, event: Event) -> tuple[TaskState, list[Command]]:
    """What a transition owes the tasks around it: ``TellParent`` when a child ends (or ends
    again: a halted child cancelled or retried to the end), and ``CancelChild`` for each live
    child that nothing waits for any more (its task ended, or the step attempt that started
    it), and for each halted one when the task is cancelled."""
    cmds: list[Command] = []
    if new.parent is not None and new.status in TERMINAL and new.status is not old.status:
        halt = new.halt
        reason = halt.reason if halt is not None else ""
        if not reason and new.operator_actions and new.operator_actions[-1].action == "cancel":
            reason = new.operator_actions[-1].reason
        cmds.append(TellParent(
            command_id=f"{new.task_id}/ended-{old.version + 1}", task_id=new.task_id, step="", attempt=0,
            parent=new.parent.as_dict(), status=new.status.value, reason=reason,
            detail=halt.detail if halt is not None else "", result=dict(new.results), version=old.version + 1,
        ))
    cur = new.current
    waited = None if new.terminal or cur is None else (cur.step, cur.attempt)
    before = old.current
    if new.status is old.status and before is not None and waited == (before.step, before.attempt):
        return new, cmds  # the same attempt still waits: no child became an orphan
    cancelled = isinstance(event, TaskCancelled) and new.status is TaskStatus.CANCELLED
    # A halted child waits in the operator queue; when its parent is cancelled it goes too.
    orphans = [c for c in new.children if not c.cancelling and (c.step, c.attempt) != waited
               and (c.live or (cancelled and c.status == TaskStatus.HALTED.value))]
    if not orphans:
        return new, cmds
    if isinstance(event, TaskCancelled) and cancelled:
        actor, why = event.actor, f"parent {new.task_id} cancelled: {event.reason}"
    else:
        actor, why = MAP_ACTOR, f"parent {new.task_id} no longer waits for it (status {new.status.value})"
    asked = {c.task_id for c in orphans}
    children = tuple(replace(c, cancelling=True) if c.task_id in asked else c for c in new.children)
    for c in orphans:
        cmds.append(CancelChild(command_id=f"{c.task_id}/cancel", task_id=new.task_id, step=c.step,
                                attempt=c.attempt, child_id=c.task_id, actor=actor, reason=why))
    return replace(new, children=children), cmds


def parent_of(state: TaskState, ev: TaskCancelled) -> ParentRef | None:
    """The parent a cascaded cancel names, when it is this task's parent."""
    if state.parent is not None and ev.by_parent == state.parent.task_id:
        return state.parent
    return None
