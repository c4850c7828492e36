"""Per-attempt workspaces for coding agents, and the protected paths checks rely on.

    base = resolve_commit(repo, "main")           # pin the base before any agent runs
    ws = prepare_workspace(repo, base, dest)      # a detached git worktree at base
    ... run the agent in ws ...
    touched = protected_changes(ws, base, ["tests/"])
    if touched: fail the attempt with reason "protected_path_modified"
    restore_protected(ws, base, ["tests/"])       # then run the check in ws

Each ai attempt works in its own ``git worktree`` (detached, so an agent's commits move
no branch). A directory that is not in a git repository is copied instead, and the copy
is made a git repository with one snapshot commit; ``base_ref`` is ignored for the copy
and that snapshot is the base (``protected_changes`` and ``restore_protected`` fall back
to it when ``base_ref`` does not name a commit in the copy).

Pass a commit id as ``base_ref`` (``resolve_commit``): a branch name can be moved by an
agent that runs git in the shared repository. Git runs here with replace objects, hooks
and fsmonitor turned off, so files an agent can write do not change what git reports.
This guards against an agent that edits, deletes or adds files under a protected path,
committed or not; it is not a sandbox against an agent that attacks the repository's
object store, which needs OS-level isolation.

Protected entries are git pathspecs relative to the workspace (``tests/``,
``conftest.py``, ``ci/*.yml``); reported paths are relative to it too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from .._errors import PermanentError
from .base import Reason

SNAPSHOT_REF = "refs/statewright/base"
_GIT_TIMEOUT_SECONDS = 300.0
_SAFE_CONFIG = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.fsmonitor=false",
    "-c", "core.untrackedCache=false",
    "-c", "core.quotePath=false",
)
_SNAPSHOT_IDENTITY = (
    "-c", "user.name=statewright",
    "-c", "user.email=statewright@localhost",
    "-c", "commit.gpgsign=false",
)


def resolve_commit(repo: Path, ref: str) -> str:
    """The full commit id ``ref`` names in ``repo``; PermanentError if it names none."""
    result = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if result.returncode != 0:
        msg = f"{repo}: {ref!r} does not name a commit; give a branch, tag or commit id"
        raise PermanentError(msg, reason=Reason.NOT_FOUND)
    return result.stdout.strip()


def prepare_workspace(repo: Path, base_ref: str, dest: Path) -> Path:
    """A fresh workspace for one attempt at ``dest``; returns the directory to run in.

    In a git repository: a detached worktree of ``base_ref``. If ``repo`` is a
    subdirectory of its repository, the returned path is the same subdirectory of the
    worktree. If ``dest`` already is a worktree of this repository (a redelivered
    command), it is removed and made again, so the attempt starts from ``base_ref``.
    Elsewhere: a copy of ``repo`` with a snapshot commit (see the module docstring).
    """
    repo = Path(repo).resolve()
    dest = Path(dest).absolute()
    if not repo.is_dir():
        raise PermanentError(f"workspace source {repo} is not a directory", reason=Reason.NOT_FOUND)
    top = _toplevel(repo)
    if top is None:
        return _copy_workspace(repo, dest)
    commit = resolve_commit(repo, base_ref)
    if dest.exists():
        _remove_stale(top, dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _git(top, "worktree", "add", "--detach", str(dest), commit)
    return dest / repo.relative_to(top)


def remove_workspace(repo: Path, workspace: Path) -> None:
    """Delete an attempt's workspace (and its worktree registration, if it has one)."""
    workspace = Path(workspace).absolute()
    top = _toplevel(Path(repo).resolve())
    if top is not None and _is_worktree_of(top, workspace):
        _git(top, "worktree", "remove", "--force", str(workspace))
        return
    shutil.rmtree(workspace, ignore_errors=True)


def protected_changes(workspace: Path, base_ref: str, protected: Sequence[str]) -> list[str]:
    """Paths under ``protected`` that differ from ``base_ref``, sorted.

    Counts committed, staged and unstaged edits, deletions, renames (both sides) and
    new untracked files; ignored files are left to ``restore_protected``.
    """
    if not protected:
        return []
    root = _root(workspace)
    base = _base_commit(root, base_ref)
    specs = _pathspecs(protected)
    diff = _git(root, "diff", "--no-renames", "--relative", "--name-only", "-z", base, "--", *specs)
    new = _git(root, "ls-files", "--others", "--exclude-standard", "-z", "--", *specs)
    names = {n for n in (diff.stdout + new.stdout).split("\0") if n}
    return sorted(names)


def restore_protected(workspace: Path, base_ref: str, protected: Sequence[str]) -> None:
    """Make every protected path exactly what it is in ``base_ref``.

    Edits and deletions are undone, and files the base does not have (untracked or
    ignored ones included) are removed, so a check runs against the base's assets.
    """
    if not protected:
        return
    root = _root(workspace)
    base = _base_commit(root, base_ref)
    specs = _pathspecs(protected)
    _git(root, "clean", "-ffdxq", "--", *specs)
    for spec in specs:
        in_base = _git(root, "ls-tree", "-r", "--name-only", base, "--", spec).stdout.strip()
        in_index = _git(root, "ls-files", "--", spec).stdout.strip()
        if in_base or in_index:
            _git(root, "restore", f"--source={base}", "--staged", "--worktree", "--", spec)


# -- helpers ------------------------------------------------------------------------------


def _copy_workspace(repo: Path, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(repo, dest, symlinks=True)
    if shutil.which("git") is None:
        return dest
    _git(dest, "init", "--quiet")
    _git(dest, "add", "--all", "--force")
    _git(dest, *_SNAPSHOT_IDENTITY, "commit", "--quiet", "--allow-empty", "--no-verify",
         "-m", "statewright: snapshot of the workspace source")
    _git(dest, "update-ref", SNAPSHOT_REF, "HEAD")
    return dest


def _base_commit(root: Path, base_ref: str) -> str:
    result = _git(root, "rev-parse", "--verify", "--quiet", f"{base_ref}^{{commit}}", check=False)
    if result.returncode == 0:
        return result.stdout.strip()
    snapshot = _git(root, "rev-parse", "--verify", "--quiet", SNAPSHOT_REF, check=False)
    if snapshot.returncode == 0:
        return snapshot.stdout.strip()
    msg = (
        f"{root}: base {base_ref!r} does not name a commit; "
        "pass the commit the workspace was made from"
    )
    raise PermanentError(msg, reason=Reason.NOT_FOUND)


def _root(workspace: Path) -> Path:
    root = Path(workspace).resolve()
    if not root.is_dir() or _toplevel(root) is None:
        msg = f"{workspace} is not a git workspace; make it with prepare_workspace()"
        raise PermanentError(msg, reason=Reason.NOT_FOUND)
    return root


def _toplevel(path: Path) -> Path | None:
    if shutil.which("git") is None:
        return None
    result = _git(path, "rev-parse", "--show-toplevel", check=False)
    if result.returncode != 0:
        return None
    return Path(result.stdout.strip()).resolve()


def _is_worktree_of(top: Path, path: Path) -> bool:
    listing = _git(top, "worktree", "list", "--porcelain", "-z").stdout
    wanted = os.path.realpath(path)
    for field in listing.split("\0"):
        if field.startswith("worktree ") and os.path.realpath(field[9:]) == wanted:
            return True
    return False


def _remove_stale(top: Path, dest: Path) -> None:
    if _is_worktree_of(top, dest):
        _git(top, "worktree", "remove", "--force", str(dest))
    elif dest.is_dir() and not any(dest.iterdir()):
        dest.rmdir()
    else:
        msg = f"{dest} already exists and is not a worktree of {top}; remove it or pick a new dir"
        raise PermanentError(msg, reason=Reason.INVALID_SPEC)
    _git(top, "worktree", "prune")


def _pathspecs(protected: Sequence[str]) -> list[str]:
    specs = []
    for entry in protected:
        if not isinstance(entry, str) or not entry.strip():
            raise PermanentError(f"protected paths must be non-empty strings; got {entry!r}",
                                 reason=Reason.INVALID_SPEC)
        if entry.startswith("/") or ".." in Path(entry).parts:
            msg = f"protected path {entry!r} must be relative to the workspace and stay inside it"
            raise PermanentError(msg, reason=Reason.INVALID_SPEC)
        specs.append(entry)
    return specs


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update({"GIT_NO_REPLACE_OBJECTS": "1", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"):
        env.pop(name, None)
    try:
        result = subprocess.run(
            ["git", *_SAFE_CONFIG, *args], cwd=cwd, env=env, capture_output=True,
            text=True, timeout=_GIT_TIMEOUT_SECONDS, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PermanentError(f"git {args[0]} in {cwd} failed: {exc}") from None
    if check and result.returncode != 0:
        msg = f"git {' '.join(args)} in {cwd} failed: {result.stderr.strip()}"
        raise PermanentError(msg)
    return result
