"""A human step's declared artifacts, read by content hash: before the proposal is shown,
and again before any later step runs.

    artifacts: [draft.txt, diff]

A name is a file under the task's workspace, read as a regular file (a symbolic link, a
FIFO or a path through a link out of the workspace is refused) and hashed whole. ``diff``
is the work in a git workspace against the task's base commit (``base_commit``, pinned at
submit, or ``base_ref`` resolved when the proposal is built): the commit checked out plus
``git diff --binary BASE`` of the tracked files (untracked files are not part of the work;
commit them or declare them). git runs with the workspace's hooks, external diff
drivers and text conversions off, and with a minimal environment (no secrets): a workspace's
``.git/config`` is the agent's to write.

What the approver is shown of each (``text``) is its start, cut at SHOWN_CHARS; the
sha256 covers the whole content. An approved artifact that reads differently before a
later step runs voids the approval (``artifact_changed``): nothing is acted on that the
hash does not cover."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from statewright._errors import InputError
from statewright._json_limits import read_regular_file
from statewright.definition.model import StepKind
from statewright.machine.state import Outcome, TaskState

DIFF = "diff"
MAX_ARTIFACT_BYTES = 16 * 1024 * 1024  # one artifact, hashed whole
SHOWN_CHARS = 20_000  # of each artifact's text, kept for the review
MISSING_ARTIFACT = "missing_artifact"
_GIT_TIMEOUT_SECONDS = 60
_SAFE_GIT = (
    "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false",
    "-c", "core.quotePath=false", "-c", "diff.external=", "-c", "core.attributesFile=/dev/null",
)


class ArtifactError(Exception):
    """An artifact that cannot be read: ``reason`` is the attempt's reason code."""

    def __init__(self, message: str, reason: str = MISSING_ARTIFACT) -> None:
        super().__init__(message)
        self.reason = reason


def capture(workspace: Path, names: Sequence[str], task_input: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{name: {"sha256", "bytes", "text"[, "base", "head"]}}`` for each declared artifact."""
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        if name == DIFF:
            base = _base(workspace, task_input)
            head, data = _work_diff(workspace, base)
            out[name] = {**_entry(data), "base": base, "head": head}
        else:
            out[name] = _entry(read_artifact(workspace, name))
    return out


def changes(workspace: Path, approved: Mapping[str, Mapping[str, Any]], task_input: Mapping[str, Any]) -> list[str]:
    """What differs now from the approved artifacts (one line each; empty when nothing does)."""
    found: list[str] = []
    for name, was in approved.items():
        try:
            if name == DIFF:
                head, data = _work_diff(workspace, str(was.get("base", "")))
                now = {**_digest(data), "head": head}
            else:
                now = _digest(read_artifact(workspace, name))
        except ArtifactError as exc:
            found.append(f"{name}: {exc}")
            continue
        if now["sha256"] != was.get("sha256") or now.get("head", was.get("head")) != was.get("head"):
            found.append(f"{name} changed after it was approved (sha256 {str(was.get('sha256'))[:12]}... "
                         f"approved, {now['sha256'][:12]}... now)")
    return found


def approved_artifacts(state: TaskState, before_step: str) -> dict[str, Mapping[str, Any]]:
    """The artifacts of every approved human step before ``before_step`` (its latest
    attempt passed), by name; a later gate's entry replaces an earlier one's."""
    wf = state.workflow
    out: dict[str, Mapping[str, Any]] = {}
    for step in wf.steps[: wf.index_of(before_step)]:
        if step.kind is not StepKind.HUMAN or not step.artifacts:
            continue
        mine = state.attempts_of(step.id)
        if mine and mine[-1].outcome is Outcome.PASSED and mine[-1].verdict:
            shown = mine[-1].verdict.get("artifacts")
            if isinstance(shown, Mapping):
                out.update(shown)
    return out


def read_artifact(workspace: Path, name: str) -> bytes:
    """The bytes of the workspace file ``name``: a regular file whose directory, resolved,
    is inside the workspace."""
    path = workspace / name
    root = os.path.realpath(workspace)
    parent = os.path.realpath(path.parent)
    if parent != root and not parent.startswith(root + os.sep):
        raise ArtifactError(f"{name} lies outside the task's workspace (through a symbolic link)")
    try:
        data = read_regular_file(path, name, MAX_ARTIFACT_BYTES, follow_links=False)
    except InputError as exc:
        raise ArtifactError(str(exc)) from None
    if len(data) > MAX_ARTIFACT_BYTES:
        raise ArtifactError(f"{name} is over {MAX_ARTIFACT_BYTES:,} bytes", reason="output_too_large")
    return data


def _digest(data: bytes) -> dict[str, Any]:
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def _entry(data: bytes) -> dict[str, Any]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = f"[binary, {len(data):,} bytes]"
    if len(text) > SHOWN_CHARS:
        text = text[:SHOWN_CHARS] + f"\n[... cut: {len(data):,} bytes in all; the sha256 covers them all ...]"
    return {**_digest(data), "text": text}


def _base(workspace: Path, task_input: Mapping[str, Any]) -> str:
    pinned = task_input.get("base_commit")
    if isinstance(pinned, str) and pinned:
        return pinned
    ref = task_input.get("base_ref")
    if not isinstance(ref, str) or not ref:
        raise ArtifactError("diff needs a base: the task's input names no base_commit or base_ref")
    return _git(workspace, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").decode().strip()


def _work_diff(workspace: Path, base: str) -> tuple[str, bytes]:
    """The commit checked out, and the diff of the tracked files against ``base``."""
    if not base:
        raise ArtifactError("diff: no base commit was recorded")
    head = _git(workspace, "rev-parse", "--verify", "--quiet", "HEAD").decode().strip()
    diff = _git(workspace, "diff", "--binary", "--no-ext-diff", "--no-textconv", "--no-color",
                "--full-index", base, "--")
    return head, diff


def _git(workspace: Path, *args: str) -> bytes:
    import subprocess  # here: most steps record no diff
    import tempfile

    with tempfile.TemporaryDirectory(prefix="statewright-git-") as home:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
            "GIT_NO_REPLACE_OBJECTS": "1", "GIT_ATTR_NOSYSTEM": "1",
        }
        try:
            result = subprocess.run(
                ["git", *_SAFE_GIT, *args], cwd=workspace, env=env, capture_output=True,
                timeout=_GIT_TIMEOUT_SECONDS, check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ArtifactError(f"diff: git {args[0]} failed ({exc})") from None
    if result.returncode != 0:
        why = result.stderr.decode(errors="replace").strip().splitlines()
        raise ArtifactError(f"diff: git {args[0]} failed ({why[-1] if why else f'exit {result.returncode}'})")
    if len(result.stdout) > MAX_ARTIFACT_BYTES:
        raise ArtifactError(f"diff is over {MAX_ARTIFACT_BYTES:,} bytes", reason="output_too_large")
    return result.stdout
