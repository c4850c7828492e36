"""Run one command in its own process group, with a timeout that kills the whole group.

POSIX only (``start_new_session`` and ``os.killpg``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._errors import PermanentError
from .base import Reason

# Output kept per stream: the last OUTPUT_LIMIT_CHARS characters (the end is where the
# failing assertion or the traceback is).
OUTPUT_LIMIT_CHARS = 20_000
# After a timeout the group gets SIGTERM, then SIGKILL this many seconds later.
KILL_GRACE_SECONDS = 1.0


@dataclass(frozen=True)
class ProcessOutcome:
    """What a finished (or killed) command left behind. Output is already cut."""

    returncode: int | None  # None when it was killed for running too long
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float


def cut_output(text: str, limit: int = OUTPUT_LIMIT_CHARS) -> str:
    """The last ``limit`` characters, with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"[... {len(text) - limit} earlier characters cut ...]\n" + text[-limit:]


def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_seconds: float,
    stdin_text: str | None = None,
) -> ProcessOutcome:
    """Run ``argv`` (never through a shell) and wait at most ``timeout_seconds``.

    The program is looked up on the step env's PATH, or the worker's PATH when the step
    env has none. A program that does not exist raises PermanentError. Members of the
    process group still alive when the command ends are killed with it.
    """
    executable = _find_executable(argv[0], cwd, env)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            [executable, *argv[1:]],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        msg = f"command {argv[0]!r} could not start in {cwd}: {exc.strerror or exc}"
        raise PermanentError(msg, reason=Reason.NOT_FOUND) from None
    data = stdin_text.encode() if stdin_text is not None else None
    timed_out = False
    try:
        out, err = proc.communicate(input=data, timeout=timeout_seconds)
    except subprocess.TimeoutExpired:
        timed_out = True
        out, err = _stop_group(proc)
    finally:
        _kill_group(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return ProcessOutcome(
        returncode=None if timed_out else proc.returncode,
        stdout=cut_output(out.decode("utf-8", "replace")),
        stderr=cut_output(err.decode("utf-8", "replace")),
        timed_out=timed_out,
        seconds=time.monotonic() - started,
    )


def _stop_group(proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    _kill_group(proc.pid, signal.SIGTERM)
    try:
        return proc.communicate(timeout=KILL_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    _kill_group(proc.pid, signal.SIGKILL)
    try:
        return proc.communicate(timeout=KILL_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        # A descendant left the group (setsid) and still holds our pipes: give up on
        # the rest of the output rather than wait for it.
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        proc.wait()
        return b"", b""


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _find_executable(program: str, cwd: Path, env: Mapping[str, str]) -> str:
    if os.sep in program:
        path = Path(program) if Path(program).is_absolute() else cwd / program
        return str(path)
    search = env.get("PATH") or os.environ.get("PATH", os.defpath)
    found = shutil.which(program, path=search)
    if found is None:
        msg = f"command {program!r} is not on PATH ({search}); install it or give its full path"
        raise PermanentError(msg, reason=Reason.NOT_FOUND)
    return found
