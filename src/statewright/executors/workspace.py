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
agent that runs git in the shared repository (the runtime pins it when a task is
submitted). Protected files are compared by content with the base commit's blobs, read
through a private index, so the workspace's index and its flags (``assume-unchanged``,
``skip-worktree``) hide nothing. Git runs here with replace objects, hooks and fsmonitor
turned off, so files an agent can write do not change what git reports. This guards
against an agent that edits, deletes or adds files under a protected path, committed or
not; it is not a sandbox against an agent that forges objects in the repository's object
store, which needs OS-level isolation.

Protected entries are git pathspecs relative to the workspace (``tests/``,
``conftest.py``, ``ci/*.yml``); reported paths are relative to it too.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .._errors import PermanentError
from .base import Reason

SNAPSHOT_REF = "refs/statewright/base"
_FULL_COMMIT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
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


def base_commit_of(repo: Path, ref: str) -> str | None:
    """The commit ``ref`` names in ``repo`` now, or None when ``repo`` is not in a git
    repository (PermanentError when it is but ``ref`` names no commit)."""
    repo = Path(repo)
    if not repo.is_dir() or _toplevel(repo.resolve()) is None:
        return None
    return resolve_commit(repo, ref)


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
    """Paths under ``protected`` whose content differs from ``base_ref``, sorted.

    Compares what is on disk with the base commit's blobs, never the index or its flags
    (``assume-unchanged`` and ``skip-worktree`` hide nothing): edits, deletions, a file
    made a symlink or a directory made one, a changed executable bit, and files the base
    does not have (new ones, committed, staged or untracked; ignored files are left to
    ``restore_protected``) are all reported.
    """
    if not protected:
        return []
    root = _root(workspace)
    base = _base_commit(root, base_ref)
    specs = _pathspecs(protected)
    expected = _base_entries(root, base, specs)
    changed = {path for path, entry in expected.items() if not _on_disk_as(root, path, entry)}
    listed = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *specs)
    for path in listed.stdout.split("\0"):
        if path and path not in expected and os.path.lexists(root / path):
            changed.add(path)
    return sorted(changed)


def restore_protected(workspace: Path, base_ref: str, protected: Sequence[str]) -> None:
    """Make every protected path exactly what it is in ``base_ref``.

    Edits and deletions are undone, index flags that hide edits are cleared, symlinks
    standing in for protected directories are removed, and files the base does not have
    (untracked or ignored ones included) are removed, so a check runs against the base's
    assets. Raises PermanentError if the paths still differ afterwards.
    """
    if not protected:
        return
    root = _root(workspace)
    base = _base_commit(root, base_ref)
    specs = _pathspecs(protected)
    expected = _base_entries(root, base, specs)
    for path in expected:
        _unlink_symlinked_parents(root, path)
    indexed = _git(root, "ls-files", "-z", "--", *specs).stdout
    if indexed:
        for flag in ("--no-assume-unchanged", "--no-skip-worktree"):  # one flag per call
            _git(root, "update-index", "-q", flag, "-z", "--stdin", stdin=indexed)
    _git(root, "clean", "-ffdxq", "--", *specs)
    for spec in specs:
        in_base = _git(root, "ls-tree", "-r", "--name-only", base, "--", spec).stdout.strip()
        in_index = _git(root, "ls-files", "--", spec).stdout.strip()
        if in_base or in_index:
            _git(root, "restore", f"--source={base}", "--staged", "--worktree", "--", spec)
    for path, entry in expected.items():
        if not _on_disk_as(root, path, entry):
            _write_entry(root, path, entry)
    left = protected_changes(root, base, protected)
    if left:
        msg = f"{root}: protected paths could not be restored from {base[:12]}: {', '.join(left)}"
        raise PermanentError(msg)


# -- helpers ------------------------------------------------------------------------------


def _base_entries(root: Path, base: str, specs: Sequence[str]) -> dict[str, tuple[str, str]]:
    """``{path: (mode, blob id)}`` for the files under ``specs`` in commit ``base``, paths
    relative to ``root``, read through a private index (never the workspace's own)."""
    with tempfile.TemporaryDirectory(prefix="statewright-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(root, "read-tree", base, env=env)
        listing = _git(root, "ls-files", "-s", "-z", "--", *specs, env=env).stdout
    entries = {}
    for record in listing.split("\0"):
        if not record:
            continue
        meta, _, path = record.partition("\t")
        mode, oid, _stage = meta.split(" ")
        entries[path] = (mode, oid)
    return entries


def _on_disk_as(root: Path, path: str, entry: tuple[str, str]) -> bool:
    """Whether ``root/path`` holds exactly the blob ``entry`` (same kind, mode and bytes)."""
    mode, oid = entry
    if mode == "160000":  # a submodule: its own repository, not compared here
        return True
    if _symlinked_parent(root, path) is not None:
        return False
    full = root / path
    try:
        st = os.lstat(full)
    except OSError:
        return False
    if mode == "120000":
        return stat.S_ISLNK(st.st_mode) and _blob_id(os.fsencode(os.readlink(full)), oid) == oid
    if not stat.S_ISREG(st.st_mode) or bool(st.st_mode & 0o100) != (mode == "100755"):
        return False
    try:
        data = full.read_bytes()
    except OSError:
        return False
    return _blob_id(data, oid) == oid


def _blob_id(data: bytes, like: str) -> str:
    """Git's object id of a blob holding ``data``, in the hash ``like`` uses (SHA-1 or SHA-256)."""
    digest = hashlib.sha256() if len(like) == 64 else hashlib.sha1()
    digest.update(b"blob %d\0" % len(data))
    digest.update(data)
    return digest.hexdigest()


def _symlinked_parent(root: Path, path: str) -> Path | None:
    """The first directory on the way from ``root`` to ``path`` that is a symlink, if any."""
    current = root
    for part in Path(path).parts[:-1]:
        current = current / part
        if current.is_symlink():
            return current
    return None


def _unlink_symlinked_parents(root: Path, path: str) -> None:
    while (link := _symlinked_parent(root, path)) is not None:
        link.unlink()


def _write_entry(root: Path, path: str, entry: tuple[str, str]) -> None:
    """Put the blob back on disk byte for byte (no filters: what the check compares)."""
    mode, oid = entry
    data = _git_bytes(root, "cat-file", "blob", oid)
    full = root / path
    if full.is_dir() and not full.is_symlink():
        shutil.rmtree(full)
    elif os.path.lexists(full):
        full.unlink()
    full.parent.mkdir(parents=True, exist_ok=True)
    if mode == "120000":
        os.symlink(os.fsdecode(data), full)
        return
    full.write_bytes(data)
    full.chmod(0o755 if mode == "100755" else 0o644)


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
    # A pinned commit id that the workspace's repository lacks is never replaced by the
    # snapshot ref: the workspace (and its .git pointer) is the agent's to write.
    pinned = _FULL_COMMIT_ID.fullmatch(base_ref) is not None
    snapshot = _git(root, "rev-parse", "--verify", "--quiet", SNAPSHOT_REF, check=False)
    if snapshot.returncode == 0 and not pinned:
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


def _git_env(extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GIT_NO_REPLACE_OBJECTS": "1", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"):
        env.pop(name, None)
    env.update(extra or {})
    return env


def _git_bytes(cwd: Path, *args: str) -> bytes:
    try:
        result = subprocess.run(
            ["git", *_SAFE_CONFIG, *args], cwd=cwd, env=_git_env(None), capture_output=True,
            timeout=_GIT_TIMEOUT_SECONDS, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PermanentError(f"git {args[0]} in {cwd} failed: {exc}") from None
    if result.returncode != 0:
        msg = f"git {' '.join(args)} in {cwd} failed: {result.stderr.decode(errors='replace').strip()}"
        raise PermanentError(msg)
    return result.stdout


def _git(
    cwd: Path, *args: str, check: bool = True, env: dict[str, str] | None = None,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    try:
        result = subprocess.run(
            ["git", *_SAFE_CONFIG, *args], cwd=cwd, env=_git_env(env), capture_output=True,
            text=True, timeout=_GIT_TIMEOUT_SECONDS, check=False, input=stdin,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PermanentError(f"git {args[0]} in {cwd} failed: {exc}") from None
    if check and result.returncode != 0:
        msg = f"git {' '.join(args)} in {cwd} failed: {result.stderr.strip()}"
        raise PermanentError(msg)
    return result
