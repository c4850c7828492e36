"""Where a command runs, and the protected paths its checks rely on.

A task whose input names a local git repository works on per-attempt workspaces:
each ai attempt gets its own detached git worktree at the base commit. The base is pinned
when the task is submitted: the commit ``base_ref`` (default ``HEAD``) names then is recorded
in the task's input as ``base_commit`` and every attempt and check uses that commit, never a
ref read later (an agent can move a branch from its worktree). After the agent,
any change under the step's ``protected`` paths fails the attempt with reason
``protected_path_modified``. Code steps and wait checks run in the worktree of the latest
passed ai attempt, with protected paths restored from that attempt's base first, so a
check always runs against assets the worker could not write.

A task whose input names a ``workspace`` directory runs every command there; otherwise
each task gets a directory of its own under the engine's workspace root.

Which input key names the local git repository (``repo_key``): ``repo``, but in a workflow
with a ``github:`` key, where ``repo`` is the GitHub repository (OWNER/NAME) its events come
from, it is ``checkout``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statewright._errors import InputError, PermanentError
from statewright._record import record
from statewright.definition.model import Step, StepKind, Workflow
from statewright.machine.state import Outcome, TaskState


@record
class AttemptSpace:
    """The directory an attempt works in, the commit it started from and the paths it may not
    change."""

    path: Path
    base_commit: str = ""
    protected: tuple[str, ...] = ()
    per_attempt: bool = False


LOCAL_REPO, GITHUB_CHECKOUT = "repo", "checkout"


def repo_key(wf: Workflow) -> str:
    """The input key that names the task's local git repository in ``wf``."""
    return GITHUB_CHECKOUT if wf.github is not None else LOCAL_REPO


def repo_of(state: TaskState) -> Path | None:
    repo = state.input.get(repo_key(state.workflow)) if isinstance(state.input, Mapping) else None
    return Path(str(repo)).resolve() if repo else None


def pin_base(wf: Workflow, data: dict[str, Any]) -> dict[str, Any]:
    """The task input with ``base_commit`` recorded, when it names a local git repository.

    Raises InputError when ``base_ref`` names no commit in the repository. A repository that
    is not (yet) a git repository is left as it is (it is copied per attempt instead).
    """
    key = repo_key(wf)
    repo = data.get(key)
    if not repo or not isinstance(repo, str):
        return data
    from statewright.executors.workspace import base_commit_of  # here: most tasks have no repo

    ref = str(data.get("base_ref") or data.get("base_commit") or "HEAD")
    try:
        commit = base_commit_of(Path(repo), ref)
    except PermanentError as exc:
        raise InputError(f"input {key!r}: {exc}") from None
    return data if commit is None else {**data, "base_commit": commit}


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
    pinned = state.input.get("base_commit")
    base = resolve_commit(repo, str(pinned or state.input.get("base_ref") or "HEAD"))
    dest = (root / state.task_id / f"{step.id}-{attempt}").resolve()
    if dest.exists():  # a redelivered attempt starts clean
        remove_workspace(repo, dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    path = prepare_workspace(repo, base, dest)
    return AttemptSpace(path=path, base_commit=base, protected=step.protected, per_attempt=True)


def for_check(state: TaskState, step: Step) -> AttemptSpace | None:
    """The worktree a code step or check runs in, protected paths restored; None when the
    task has no ``repo``."""
    repo = repo_of(state)
    if repo is None:
        return None
    from statewright.executors.workspace import restore_protected  # here: most tasks have no repo

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
