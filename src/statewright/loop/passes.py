"""How one pass is worked: the PassRunner seam and two implementations.

    PassRunner.run_pass(item, brief, attempt) -> PassResult
    PassRunner.stop_pass(item, attempt) -> bool      # stop a worker left from a crash
    PassRunner.interrupt() -> None                   # the kill switch, mid-pass

``CommandPassRunner`` runs a command per item (tests, examples, plain scripts).
``EnginePassRunner`` submits the loop's workflow to the task engine, one task per pass.

The worker's words come back as ``note``; nothing reads them as a verdict.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from statewright._errors import InputError, PermanentError
from statewright._json_limits import loads_json_object, read_regular_file
from statewright.executors._process import run_process
from statewright.loop._isolation import command_env
from statewright.loop.definition import CommandSpec
from statewright.loop.sources import WorkItem


class PassStatus(StrEnum):
    """Whether the worker came back with something to check."""

    RETURNED = "returned"
    NO_RESULT = "no result"


@dataclass(frozen=True)
class PassResult:
    """What a pass produced. ``cause`` says why there is no result."""

    status: PassStatus
    note: str = ""
    cost_tokens: int = 0
    cost_usd: float = 0.0
    artifacts: tuple[str, ...] = ()
    receipts: tuple[str, ...] = ()
    cause: str = ""


class PassRunner(Protocol):
    """Works one item for one attempt. ``item.run_id`` names the run."""

    def run_pass(self, item: WorkItem, brief: str, attempt: int) -> PassResult: ...

    def stop_pass(self, item: WorkItem, attempt: int) -> bool: ...

    def interrupt(self) -> None: ...


def pass_key(item: WorkItem, attempt: int) -> str:
    """The idempotency key of one attempt: one worker per (run, item, attempt)."""
    return f"loop-run-{item.run_id}-item-{item.id}-attempt-{attempt}"


class CommandPassRunner:
    """Run the loop's worker command once per pass, in ``cwd``, with the brief on stdin.

    The command gets a minimal environment, never the runner's (``loop._isolation``):
    the base a task step gets, what ``spec`` declares, and ``STATEWRIGHT_RUN_ID``,
    ``STATEWRIGHT_ITEM_ID``, ``STATEWRIGHT_ITEM`` (the item as JSON),
    ``STATEWRIGHT_ATTEMPT``, ``STATEWRIGHT_BRIEF``, ``STATEWRIGHT_IDEMPOTENCY_KEY`` and
    ``STATEWRIGHT_RESULT_FILE``. Exit 0 is a returned pass; its output is the note. It may
    write JSON ``{"tokens": N, "money_usd": X, "artifacts": [...], "receipts": [...]}`` to
    the result file (in a directory made for the pass, not next to the database; a regular
    file of plain JSON within the input bounds of ``statewright._json_limits``, costs from 0
    up, lists of texts). A non-zero exit, a timeout, a failed launch or a result file that
    breaks those rules is "no result", with the reason as its cause.

    The command runs under the step supervisor (``executors._process``): it dies with the
    runner. Where there is no parent-death signal, a pid file in ``state_dir`` lets the
    next start stop a worker a crashed runner left (``stop_pass``).
    """

    def __init__(
        self,
        spec: CommandSpec,
        *,
        cwd: Path,
        state_dir: Path,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.spec = spec
        self.cwd = cwd
        self.state_dir = state_dir
        self.environ = dict(os.environ if environ is None else environ)
        self._pid: int | None = None
        self._interrupted = False

    def _file(self, item: WorkItem, attempt: int, suffix: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", pass_key(item, attempt))
        return self.state_dir / f"{safe}.{suffix}"

    def run_pass(self, item: WorkItem, brief: str, attempt: int) -> PassResult:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        pid_file = self._file(item, attempt, "pid")
        scratch = Path(tempfile.mkdtemp(prefix="statewright-pass-"))
        result_file = scratch / "result.json"
        self._interrupted = False

        def started(pid: int) -> None:
            self._pid = pid
            pid_file.write_text(str(pid), encoding="utf-8")

        try:
            env = command_env(self.spec, self.environ, {
                "STATEWRIGHT_RUN_ID": item.run_id,
                "STATEWRIGHT_ITEM_ID": item.id,
                "STATEWRIGHT_ITEM": json.dumps(dict(item.data), sort_keys=True, default=str),
                "STATEWRIGHT_ATTEMPT": str(attempt),
                "STATEWRIGHT_BRIEF": brief,
                "STATEWRIGHT_IDEMPOTENCY_KEY": pass_key(item, attempt),
                "STATEWRIGHT_RESULT_FILE": str(result_file),
            })
            done = run_process(
                self.spec.argv,
                cwd=self.cwd,
                env=env,
                timeout_seconds=self.spec.timeout_seconds,
                stdin_text=brief,
                on_start=started,
                merge_stderr=True,
            )
            extra, problem = _read_result(result_file)
        except PermanentError as exc:
            return PassResult(PassStatus.NO_RESULT, cause=f"launch failed: {exc}")
        finally:
            self._pid = None
            pid_file.unlink(missing_ok=True)
            shutil.rmtree(scratch, ignore_errors=True)
        note = done.stdout.strip()
        if self._interrupted:
            return PassResult(PassStatus.NO_RESULT, note, cause="stopped by the kill switch")
        if done.timed_out:
            cause = f"cap fired: the worker ran past {self.spec.timeout_seconds:g}s"
            return PassResult(PassStatus.NO_RESULT, note, cause=cause)
        if done.returncode != 0:
            cause = f"the worker exited with status {done.returncode}"
            return PassResult(PassStatus.NO_RESULT, note, cause=cause)
        if problem:
            return PassResult(PassStatus.NO_RESULT, note, cause=problem)
        return PassResult(
            PassStatus.RETURNED,
            note,
            cost_tokens=_int(extra.get("tokens")),
            cost_usd=_float(extra.get("money_usd")),
            artifacts=tuple(str(a) for a in extra.get("artifacts", []) or []),
            receipts=tuple(str(r) for r in extra.get("receipts", []) or []),
        )

    def stop_pass(self, item: WorkItem, attempt: int) -> bool:
        """Kill a worker of this attempt left alive by a crashed runner, if any."""
        pid_file = self._file(item, attempt, "pid")
        try:
            pid = int(pid_file.read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            return False
        killed = _kill_group(pid)
        pid_file.unlink(missing_ok=True)
        return killed

    def interrupt(self) -> None:
        pid = self._pid
        if pid is not None:
            self._interrupted = True
            _kill_group(pid)


class EnginePassRunner:
    """Run the loop's workflow in the task engine: one task per pass.

    The engine is imported lazily, so the loop layer works without it. The task's
    idempotency key is the pass key, so a repeated submit finds the same task.
    A task that ends ``halted``, ``cancelled`` or ``awaiting_approval`` is "no result"
    for this pass (gates of the loop live in AWAITING_HUMAN, not inside the pass).
    """

    def __init__(self, db_path: str | Path, workflow_path: str | Path) -> None:
        self.db_path = str(db_path)
        self.workflow_path = str(workflow_path)

    def run_pass(self, item: WorkItem, brief: str, attempt: int) -> PassResult:
        from statewright.runtime.engine import Engine  # lazy: the engine is optional here
        from statewright.runtime.run import run_task

        engine: Any = Engine.open(self.db_path)
        try:
            task_id = engine.submit(
                self.workflow_path,
                {"item": dict(item.data), "brief": brief, "attempt": attempt},
                key=pass_key(item, attempt),
            )
            view = run_task(engine, task_id)
        finally:
            close = getattr(engine, "close", None)
            if callable(close):
                close()
        cost = getattr(view, "cost", None)
        tokens = _int(_field(cost, "tokens_in")) + _int(_field(cost, "tokens_out"))
        money = _float(_field(cost, "money_usd"))
        status = str(getattr(view, "status", ""))
        note = f"task {task_id} {status}"
        if status in ("completed", "completed_early"):
            return PassResult(PassStatus.RETURNED, note, tokens, money, artifacts=(f"task:{task_id}",))
        return PassResult(PassStatus.NO_RESULT, note, tokens, money, cause=f"task {task_id} ended {status}")

    def stop_pass(self, item: WorkItem, attempt: int) -> bool:
        # A task is durable in the engine; the engine's own recovery owns it.
        return False

    def interrupt(self) -> None:
        return None


def _kill_group(pid: int) -> bool:
    """SIGKILL the process group led by ``pid``. True if something was there to kill."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _field(cost: object, name: str) -> object:
    """A cost figure from a mapping (``view.cost["tokens_in"]``) or an object attribute."""
    if isinstance(cost, Mapping):
        return cost.get(name, 0)
    return getattr(cost, name, 0)


def _read_result(path: Path) -> tuple[Mapping[str, Any], str]:
    """The worker's result file ({} when it wrote none) and, when it cannot be taken, why.
    The worker controls the file: it is read bounded, without following a link or
    blocking, and parsed by the bounded JSON loader."""
    if not os.path.lexists(path):
        return {}, ""
    what = "the pass's result file ($STATEWRIGHT_RESULT_FILE)"
    try:
        value = loads_json_object(read_regular_file(path, what, follow_links=False), what)
    except InputError as exc:
        return {}, str(exc)
    for name in ("tokens", "money_usd"):
        figure = value.get(name, 0)
        if isinstance(figure, bool) or not isinstance(figure, int | float) or figure < 0:
            return {}, f"{what}: {name} must be a number from 0 up, got {_shown(figure)}"
    for name in ("artifacts", "receipts"):
        texts = value.get(name) or []
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return {}, f"{what}: {name} must be a list of texts, got {_shown(texts)}"
    return value, ""


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _int(value: object) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int | float):
        return int(value)
    return 0


def _float(value: object) -> float:
    if isinstance(value, bool):
        return 0.0
    if isinstance(value, int | float):
        return float(value)
    return 0.0
