"""The labels a task shows on its GitHub issue or pull request: a projection of its state,
never a second state. The reducer asks for one ``SyncLabels`` command whenever the set a
transition leaves differs from the one before; the worker that performs it reads the task's
state as it is then, so a late or repeated command can only set the latest labels."""

from __future__ import annotations

from statewright.machine.commands import Command, SyncLabels
from statewright.machine.state import TaskState, TaskStatus

#: The statuses at a step: the step's label shows (or the loop-back label, after a loop-back).
_AT_STEP = frozenset({TaskStatus.RUNNING, TaskStatus.WAITING, TaskStatus.AWAITING_APPROVAL})


def labels_for(state: TaskState) -> frozenset[str]:
    """The labels ``state`` shows: its step's (or the loop-back label), the attempt label
    once it was sent back, and its final status's label."""
    gh = state.workflow.github
    if gh is None:
        return frozenset()
    out: set[str] = set()
    n = len(state.loop_backs)
    if state.status in _AT_STEP and state.current is not None:
        step = state.current.step
        looped = bool(state.loop_backs) and state.loop_backs[-1].target == step
        label = gh.loop_back_label if looped and gh.loop_back_label else gh.labels.get(step, "")
        if label:
            out.add(label)
    elif state.status.value in gh.terminal:
        out.add(gh.terminal[state.status.value])
    if n and gh.attempt_label:
        out.add(gh.attempt_label_for(n))
    return frozenset(out)


def label_commands(before: TaskState, after: TaskState) -> list[Command]:
    """One SyncLabels when the transition from ``before`` to ``after`` changed the labels
    the task shows (none for a workflow without a github key)."""
    gh = after.workflow.github
    if gh is None:
        return []
    shown = labels_for(after)
    if shown == labels_for(before) and _waits_on(before) == _waits_on(after):
        return []
    cur = after.current
    step = cur.step if cur is not None else (after.halt.step if after.halt is not None else "")
    key = f"{after.task_id}/labels/{after.version}"
    return [SyncLabels(
        command_id=key, task_id=after.task_id, step=step, attempt=cur.attempt if cur is not None else 0,
        idempotency_key=key, repo=gh.repo, labels=tuple(sorted(shown)), version=after.version,
    )]


def _waits_on(state: TaskState) -> str:
    """The proposal hash the task waits for an approval of ("" when none): a new one is
    shown on the pull request."""
    cur = state.current
    return cur.proposal_hash if state.status is TaskStatus.AWAITING_APPROVAL and cur is not None else ""
