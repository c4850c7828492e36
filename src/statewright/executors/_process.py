"""Run one command in its own process group, with a timeout that kills the whole group.

POSIX only (``start_new_session`` and ``os.killpg``).

A step's processes die with the worker that started them. On Linux the command runs under
a tiny ``/bin/sh`` supervisor that leads the group: the kernel sends it SIGHUP when the
worker's thread that started it dies (``prctl(PR_SET_PDEATHSIG)``, set before exec, with
SIGHUP's default action restored, and the supervisor exits at once if the worker died
before that), and it then kills its whole group. Elsewhere the command runs as the group's
leader with no such signal. The signal follows the *thread* that started the process;
``run_process`` holds that thread until the group is gone, so it never fires early.

HOME and TMPDIR, unless the step declared them, point at a private directory made for the
one process and removed after it: a step never works in the worker's home.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from statewright._record import record

from .._errors import PermanentError
from .base import OUTPUT_LIMIT_CHARS, Reason, cut_output

# After a timeout the group gets SIGTERM, then SIGKILL this many seconds later.
KILL_GRACE_SECONDS = 1.0
_PR_SET_PDEATHSIG = 1
# The supervisor: on SIGHUP (its parent died) it kills its group; otherwise it waits for the
# command and exits with its status. fd 3 carries stdin to the command (a background job's
# stdin would be /dev/null).
_SUPERVISOR = 'exec 3<&0; trap "kill -KILL 0" HUP; "$@" <&3 3<&- & wait $!'


@record
class ProcessOutcome:
    """What a finished (or killed) command left behind. Output is already cut."""

    returncode: int | None  # None when it was killed for running too long
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float


def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_seconds: float,
    stdin_text: str | None = None,
    on_start: Callable[[int], None] | None = None,
    merge_stderr: bool = False,
    output_limit_chars: int = OUTPUT_LIMIT_CHARS,
) -> ProcessOutcome:
    """Run ``argv`` (never through a shell) and wait at most ``timeout_seconds``.

    The program is looked up on the step env's PATH, or the worker's PATH when the step
    env has none. A program that does not exist raises PermanentError. Members of the
    process group still alive when the command ends are killed with it. ``on_start`` is
    given the group's id (its leader's pid) once it runs; ``merge_stderr`` interleaves
    stderr into stdout as the command writes them; each stream keeps its last
    ``output_limit_chars`` characters.
    """
    executable = find_executable(argv[0], cwd, env)
    private = Path(tempfile.mkdtemp(prefix="statewright-step-"))
    try:
        return _run(executable, argv, cwd, _with_private_dirs(env, private), timeout_seconds,
                    stdin_text, on_start, merge_stderr, output_limit_chars)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _with_private_dirs(env: Mapping[str, str], private: Path) -> dict[str, str]:
    out = dict(env)
    for name in ("HOME", "TMPDIR"):
        if name not in out:
            path = private / name.lower()
            path.mkdir(mode=0o700)
            out[name] = str(path)
    return out


def _run(
    executable: str,
    argv: Sequence[str],
    cwd: Path,
    env: dict[str, str],
    timeout_seconds: float,
    stdin_text: str | None,
    on_start: Callable[[int], None] | None = None,
    merge_stderr: bool = False,
    output_limit_chars: int = OUTPUT_LIMIT_CHARS,
) -> ProcessOutcome:
    started = time.monotonic()
    preexec = _die_with_parent()
    command = [executable, *argv[1:]]
    if preexec is not None:
        command = ["/bin/sh", "-c", _SUPERVISOR, "statewright-step", *command]
    try:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            start_new_session=True,
            preexec_fn=preexec,
        )
    except OSError as exc:
        msg = f"command {argv[0]!r} could not start in {cwd}: {exc.strerror or exc}"
        raise PermanentError(msg, reason=Reason.NOT_FOUND) from None
    data = stdin_text.encode() if stdin_text is not None else None
    timed_out = False
    try:
        if on_start is not None:
            on_start(proc.pid)
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
        stdout=cut_output(out.decode("utf-8", "replace"), output_limit_chars),
        stderr=cut_output((err or b"").decode("utf-8", "replace"), output_limit_chars),
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


def _die_with_parent() -> Callable[[], None] | None:
    """A pre-exec function that ties the child to this thread's life, or None where the
    platform has no parent-death signal. SIGHUP gets its default action back first: a
    worker started under ``nohup`` (or by anything else that ignores SIGHUP) hands the
    ignoring down, and sh refuses to trap a signal that was ignored when it started, so
    the supervisor would outlive the worker with its whole group."""
    prctl, set_signal = _prctl(), _libc_signal()
    if prctl is None or set_signal is None:
        return None
    parent = os.getpid()

    def preexec() -> None:  # runs in the child, between fork and exec
        set_signal(int(signal.SIGHUP), None)  # SIG_DFL
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGHUP), 0, 0, 0)
        if os.getppid() != parent:  # the worker died before the signal was armed
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


@functools.cache
def _libc_signal() -> Callable[..., int] | None:
    """libc's ``signal``, to set a disposition between fork and exec (Python's own
    ``signal.signal`` belongs to the main thread; a step may start from any)."""
    try:
        import ctypes

        fn: Any = ctypes.CDLL(None, use_errno=True).signal
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p]
    fn.restype = ctypes.c_void_p
    out: Callable[..., int] = fn
    return out


@functools.cache
def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux") or not os.path.exists("/bin/sh"):
        return None
    try:
        import ctypes

        fn: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return fn


def find_executable(program: str, cwd: Path, env: Mapping[str, str]) -> str:
    if os.sep in program:
        path = Path(program) if Path(program).is_absolute() else cwd / program
        if not (path.is_file() and os.access(path, os.X_OK)):
            msg = f"command {program!r} could not start in {cwd}: no executable file at {path}"
            raise PermanentError(msg, reason=Reason.NOT_FOUND)
        return str(path)
    search = env.get("PATH") or os.environ.get("PATH", os.defpath)
    found = shutil.which(program, path=search)
    if found is None:
        msg = f"command {program!r} is not on PATH ({search}); install it or give its full path"
        raise PermanentError(msg, reason=Reason.NOT_FOUND)
    return found
