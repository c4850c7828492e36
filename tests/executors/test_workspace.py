"""Per-attempt workspaces and protected paths, on real temporary git repositories."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from statewright._errors import PermanentError
from statewright.executors import (
    prepare_workspace,
    protected_changes,
    remove_workspace,
    resolve_commit,
    restore_protected,
)

PROTECTED = ["tests/"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid",
         "-c", "commit.gpgsign=false", *args],
        cwd=cwd, check=True, capture_output=True, text=True,
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_app.py").write_text("def test_add():\n    assert add(1, 2) == 3\n")
    (root / ".gitignore").write_text("__pycache__/\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "base")
    return root


@pytest.fixture
def base(repo: Path) -> str:
    return resolve_commit(repo, "main")


def test_each_attempt_gets_its_own_worktree_at_the_base(
    repo: Path, base: str, tmp_path: Path
) -> None:
    """Two attempts are independent worktrees at the pinned base; later commits don't leak in."""
    (repo / "later.txt").write_text("x")
    git(repo, "add", "later.txt")
    git(repo, "commit", "-q", "-m", "later")
    one = prepare_workspace(repo, base, tmp_path / "attempts" / "1")
    two = prepare_workspace(repo, base, tmp_path / "attempts" / "2")
    assert git(one, "rev-parse", "HEAD") == base
    assert not (one / "later.txt").exists()
    (one / "src" / "app.py").write_text("changed")
    assert (two / "src" / "app.py").read_text().startswith("def add")
    assert git(repo, "rev-parse", "main") != base  # the repo's branch is untouched


def test_a_clean_attempt_touches_nothing_protected(repo: Path, base: str, tmp_path: Path) -> None:
    """Fixing the code, committed or not, is not a protected change."""
    ws = prepare_workspace(repo, base, tmp_path / "a1")
    (ws / "src" / "app.py").write_text("def add(a, b):\n    return a + b\n")
    assert protected_changes(ws, base, PROTECTED) == []
    git(ws, "commit", "-qam", "fix")
    (ws / "tests" / "__pycache__").mkdir()
    (ws / "tests" / "__pycache__" / "x.pyc").write_bytes(b"\0")  # ignored build output
    assert protected_changes(ws, base, PROTECTED) == []


@pytest.mark.parametrize("how", ["edit", "delete", "delete-committed", "add-untracked",
                                 "add-staged", "rename-committed"])
def test_every_way_of_touching_tests_is_reported(
    repo: Path, base: str, tmp_path: Path, how: str
) -> None:
    """Edits, deletions, new files and renames under tests/ are found, committed or not."""
    ws = prepare_workspace(repo, base, tmp_path / "a1")
    test_file = ws / "tests" / "test_app.py"
    expected = ["tests/test_app.py"]
    if how == "edit":
        test_file.write_text("def test_add():\n    pass\n")
    elif how == "delete":
        test_file.unlink()
    elif how == "delete-committed":
        git(ws, "rm", "-q", "tests/test_app.py")
        git(ws, "commit", "-qm", "remove the failing test")
    elif how == "add-untracked":
        (ws / "tests" / "conftest.py").write_text("collect_ignore = ['test_app.py']\n")
        expected = ["tests/conftest.py"]
    elif how == "add-staged":
        (ws / "tests" / "conftest.py").write_text("collect_ignore = ['test_app.py']\n")
        git(ws, "add", "tests/conftest.py")
        expected = ["tests/conftest.py"]
    else:
        git(ws, "mv", "tests/test_app.py", "tests/skip_app.py")
        git(ws, "commit", "-qm", "rename")
        expected = ["tests/skip_app.py", "tests/test_app.py"]
    assert protected_changes(ws, base, PROTECTED) == expected


def test_restore_protected_puts_back_exactly_the_base(
    repo: Path, base: str, tmp_path: Path
) -> None:
    """Edits and deletions are undone and extra files, ignored ones too, are removed."""
    ws = prepare_workspace(repo, base, tmp_path / "a1")
    git(ws, "rm", "-q", "tests/test_app.py")
    git(ws, "commit", "-qm", "drop test")
    (ws / "tests").mkdir()
    (ws / "tests" / "conftest.py").write_text("raise SystemExit(0)\n")
    (ws / "tests" / "__pycache__").mkdir()
    (ws / "tests" / "__pycache__" / "conftest.pyc").write_bytes(b"\0")
    (ws / "src" / "app.py").write_text("def add(a, b):\n    return a + b\n")
    restore_protected(ws, base, PROTECTED)
    assert protected_changes(ws, base, PROTECTED) == []
    assert sorted(p.name for p in (ws / "tests").iterdir()) == ["test_app.py"]
    assert (ws / "tests" / "test_app.py").read_text() == (
        repo / "tests" / "test_app.py").read_text()
    assert "a + b" in (ws / "src" / "app.py").read_text()  # the agent's work stays


def test_protected_entries_are_pathspecs(repo: Path, base: str, tmp_path: Path) -> None:
    """Files and globs work as protected entries, and entries missing from the base are fine."""
    ws = prepare_workspace(repo, base, tmp_path / "a1")
    (ws / ".gitignore").write_text("tests/\n")
    (ws / "ci").mkdir()
    (ws / "ci" / "gate.yml").write_text("skip: true\n")
    protected = [".gitignore", "ci/*.yml", "tests/"]
    assert protected_changes(ws, base, protected) == [".gitignore", "ci/gate.yml"]
    restore_protected(ws, base, protected)
    assert protected_changes(ws, base, protected) == []
    assert not (ws / "ci" / "gate.yml").exists()


def test_bad_protected_entries_are_refused(repo: Path, base: str, tmp_path: Path) -> None:
    """Absolute paths and paths that leave the workspace are configuration errors."""
    ws = prepare_workspace(repo, base, tmp_path / "a1")
    for entry in ["/etc/passwd", "../repo/tests", ""]:
        with pytest.raises(PermanentError, match="protected path"):
            protected_changes(ws, base, [entry])


def test_a_redelivered_attempt_starts_over(repo: Path, base: str, tmp_path: Path) -> None:
    """Preparing the same destination again gives a fresh worktree at the base."""
    dest = tmp_path / "a1"
    ws = prepare_workspace(repo, base, dest)
    (ws / "tests" / "test_app.py").unlink()
    (ws / "junk.txt").write_text("x")
    ws = prepare_workspace(repo, base, dest)
    assert (ws / "tests" / "test_app.py").exists()
    assert not (ws / "junk.txt").exists()


def test_a_foreign_destination_is_not_overwritten(repo: Path, base: str, tmp_path: Path) -> None:
    """A non-empty directory that is not our worktree is left alone."""
    dest = tmp_path / "precious"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    with pytest.raises(PermanentError, match="already exists and is not a worktree"):
        prepare_workspace(repo, base, dest)
    assert (dest / "keep.txt").read_text() == "mine"


def test_unknown_base_ref_is_permanent(repo: Path, tmp_path: Path) -> None:
    """A base that names no commit raises PermanentError naming it."""
    with pytest.raises(PermanentError, match="'nope' does not name a commit"):
        prepare_workspace(repo, "nope", tmp_path / "a1")


def test_a_subdirectory_of_a_repository(repo: Path, base: str, tmp_path: Path) -> None:
    """A repo subdirectory maps to the same subdirectory of the worktree; paths are relative."""
    ws = prepare_workspace(repo / "src", base, tmp_path / "a1")
    assert ws == tmp_path / "a1" / "src"
    (ws / "app.py").write_text("x")
    assert protected_changes(ws, base, ["app.py"]) == ["app.py"]
    restore_protected(ws, base, ["app.py"])
    assert (ws / "app.py").read_text().startswith("def add")


def test_remove_workspace_unregisters_the_worktree(repo: Path, base: str, tmp_path: Path) -> None:
    """A removed attempt leaves no directory and no worktree entry."""
    ws = prepare_workspace(repo, base, tmp_path / "a1")
    remove_workspace(repo, ws)
    assert not ws.exists()
    assert str(ws) not in git(repo, "worktree", "list")


def test_a_plain_directory_is_copied_and_still_protected(tmp_path: Path) -> None:
    """Outside git the source is copied; its snapshot is the base for protected paths."""
    source = tmp_path / "plain"
    (source / "tests").mkdir(parents=True)
    (source / "tests" / "test_x.py").write_text("def test_x():\n    assert False\n")
    (source / "x.py").write_text("X = 1\n")
    ws = prepare_workspace(source, "HEAD", tmp_path / "copy")
    assert (ws / "x.py").read_text() == "X = 1\n"
    (ws / "tests" / "test_x.py").unlink()
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "agent commits the deletion")
    assert protected_changes(ws, "main-does-not-exist", PROTECTED) == ["tests/test_x.py"]
    restore_protected(ws, "main-does-not-exist", PROTECTED)
    assert (ws / "tests" / "test_x.py").exists()
    assert (source / "tests" / "test_x.py").exists()  # the source is never touched
    remove_workspace(source, ws)
    assert not ws.exists()


def test_protected_functions_need_a_git_workspace(tmp_path: Path) -> None:
    """A directory that was not prepared gives a clear PermanentError."""
    with pytest.raises(PermanentError, match="not a git workspace"):
        protected_changes(tmp_path, "HEAD", PROTECTED)


@pytest.mark.parametrize("flag", ["--assume-unchanged", "--skip-worktree"])
def test_index_flags_hide_no_edit(repo: Path, base: str, tmp_path: Path, flag: str) -> None:
    """An edit behind assume-unchanged or skip-worktree (git diff and status say nothing) is
    reported and restored: files are compared with the base's blobs, not through the index."""
    ws = prepare_workspace(repo, base, tmp_path / "a1")
    git(ws, "update-index", flag, "tests/test_app.py")
    (ws / "tests" / "test_app.py").write_text("def test_add():\n    pass\n")
    assert git(ws, "status", "--porcelain") == ""  # what the index-based check saw
    assert protected_changes(ws, base, PROTECTED) == ["tests/test_app.py"]
    restore_protected(ws, base, PROTECTED)
    assert (ws / "tests" / "test_app.py").read_text() == (repo / "tests" / "test_app.py").read_text()
    assert protected_changes(ws, base, PROTECTED) == []


def test_a_symlinked_directory_and_a_mode_change_are_reported(
    repo: Path, base: str, tmp_path: Path
) -> None:
    """tests/ made a symlink to weaker tests elsewhere, or a test file's executable bit
    flipped, is a change; restoring puts a real directory and the base's mode back."""
    ws = prepare_workspace(repo, base, tmp_path / "a1")
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "test_app.py").write_text("def test_add():\n    pass\n")
    (ws / "tests" / "test_app.py").unlink()
    (ws / "tests").rmdir()
    (ws / "tests").symlink_to(evil, target_is_directory=True)
    assert protected_changes(ws, base, PROTECTED) == ["tests/test_app.py"]
    restore_protected(ws, base, PROTECTED)
    assert not (ws / "tests").is_symlink()
    assert (evil / "test_app.py").exists()  # what the link pointed to is not touched
    assert protected_changes(ws, base, PROTECTED) == []
    (ws / "tests" / "test_app.py").chmod(0o755)
    assert protected_changes(ws, base, PROTECTED) == ["tests/test_app.py"]
    restore_protected(ws, base, PROTECTED)
    assert protected_changes(ws, base, PROTECTED) == []


def test_a_pinned_base_the_workspace_lacks_is_not_replaced_by_its_snapshot(
    repo: Path, base: str, tmp_path: Path
) -> None:
    """An agent that points its worktree's .git at a repository of its own (with a snapshot
    ref of its choosing) cannot make that snapshot the baseline of a pinned commit id."""
    ws = prepare_workspace(repo, base, tmp_path / "a1")
    fake = tmp_path / "fake"
    fake.mkdir()
    git(fake, "init", "-q")
    (fake / "tests").mkdir()
    (fake / "tests" / "test_app.py").write_text("def test_add():\n    pass\n")
    git(fake, "add", ".")
    git(fake, "commit", "-qm", "weak")
    git(fake, "update-ref", "refs/statewright/base", "HEAD")
    (ws / ".git").write_text(f"gitdir: {fake / '.git'}\n")
    (ws / "tests" / "test_app.py").write_text("def test_add():\n    pass\n")
    with pytest.raises(PermanentError, match="does not name a commit"):
        protected_changes(ws, base, PROTECTED)
