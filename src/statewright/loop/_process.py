"""Run one command (argv, no shell) with a timeout; capture its output whole.

The child runs in its own session so a timeout or a stop kills the whole process
group, grandchildren included.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

MAX_OUTPUT_CHARS = 1_000_000


@dataclass(frozen=True)
class ProcessOutcome:
    """How a command ended. ``exit_code`` is None when it timed out or never started."""

    exit_code: int | None
    output: str
    timed_out: bool = False
    error: str = ""
    stderr: str = ""


def run_argv(
    argv: tuple[str, ...],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_seconds: float,
    stdin_text: str | None = None,
    on_start: Callable[[int], None] | None = None,
    merge_stderr: bool = True,
) -> ProcessOutcome:
    """Run ``argv`` in ``cwd``; kill its process group when ``timeout_seconds`` pass."""
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=str(cwd),
            env=dict(env),
            stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            start_new_session=True,
            text=True,
            encoding="utf-8",
            errors="replace",
        )
    except OSError as exc:
        return ProcessOutcome(None, "", error=f"cannot run {argv[0]!r}: {exc.strerror or exc}")
    if on_start is not None:
        on_start(proc.pid)
    try:
        out, err = proc.communicate(stdin_text, timeout=timeout_seconds)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        out, err = proc.communicate()
        text = _cut((out or "") + (err or ""))
        return ProcessOutcome(None, text, timed_out=True, error=f"timed out after {timeout_seconds:g}s")
    return ProcessOutcome(proc.returncode, _cut(out or ""), stderr=_cut(err or ""))


def kill_group(pid: int) -> bool:
    """SIGKILL the process group led by ``pid``. True if something was there to kill."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _cut(text: str) -> str:
    if len(text) <= MAX_OUTPUT_CHARS:
        return text
    dropped = len(text) - MAX_OUTPUT_CHARS
    return text[:MAX_OUTPUT_CHARS] + f"\n[... {dropped} more characters cut]"
