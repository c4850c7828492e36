"""Where a command runs, and the protected paths its checks rely on.

A task whose input names a ``repo`` (a git repository) works on per-attempt workspaces:
each ai attempt gets its own detached git worktree at the base commit (``base_ref`` in the
input, default ``HEAD``, pinned to a commit id when the attempt starts). After the agent,
any change under the step's ``protected`` paths fails the attempt with reason
``protected_path_modified``. Code steps and wait checks run in the worktree of the latest
passed ai attempt, with protected paths restored from that attempt's base first, so a
check always runs against assets the worker could not write.

A task whose input names a ``workspace`` directory runs every command there; otherwise
each task gets a directory of its own under the engine's workspace root."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from statewright.definition.model import Step, StepKind
from statewright.machine.state import Outcome, TaskState


@dataclass(frozen=True)
class AttemptSpace:
    path: Path
    base_commit: str = ""
    protected: tuple[str, ...] = ()
    per_attempt: bool = False


def repo_of(state: TaskState) -> Path | None:
    repo = state.input.get("repo") if isinstance(state.input, Mapping) else None
    return Path(str(repo)).resolve() if repo else None


def for_ai_attempt(root: Path, state: TaskState, step: Step, attempt: int) -> AttemptSpace | None:
    """A fresh worktree for this attempt, or None when the task has no ``repo``."""
    from statewright.executors.workspace import (
        prepare_workspace,
        remove_workspace,
        resolve_commit,
    )

    repo = repo_of(state)
    if repo is None:
        return None
    base = resolve_commit(repo, str(state.input.get("base_ref") or "HEAD"))
    dest = (root / state.task_id / f"{step.id}-{attempt}").resolve()
    if dest.exists():  # a redelivered attempt starts clean
        remove_workspace(repo, dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    path = prepare_workspace(repo, base, dest)
    return AttemptSpace(path=path, base_commit=base, protected=step.protected, per_attempt=True)


def for_check(state: TaskState, step: Step) -> AttemptSpace | None:
    """The worktree a code step or check runs in, protected paths restored; None when the
    task has no ``repo``."""
    from statewright.executors.workspace import restore_protected

    repo = repo_of(state)
    if repo is None:
        return None
    for a in reversed(state.attempts):
        if a.kind == StepKind.AI.value and a.outcome is Outcome.PASSED and "workspace" in a.artifacts:
            producer = state.workflow.step(a.step)
            protected = tuple(dict.fromkeys((*step.protected, *producer.protected)))
            space = AttemptSpace(
                path=Path(a.artifacts["workspace"]), base_commit=a.artifacts.get("base_commit", ""),
                protected=protected,
            )
            if protected and space.base_commit and space.path.is_dir():
                restore_protected(space.path, space.base_commit, list(protected))
            return space
    return AttemptSpace(path=repo)


def protected_touched(space: AttemptSpace) -> list[str]:
    """Protected paths the agent changed in its worktree (committed or not)."""
    from statewright.executors.workspace import protected_changes, restore_protected

    if not space.per_attempt or not space.protected:
        return []
    touched = protected_changes(space.path, space.base_commit, list(space.protected))
    if touched:
        restore_protected(space.path, space.base_commit, list(space.protected))
    return touched
