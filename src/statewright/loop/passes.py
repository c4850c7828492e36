"""How one pass is worked: the PassRunner seam and two implementations.

    PassRunner.run_pass(item, brief, attempt) -> PassResult
    PassRunner.await_pass(item, attempt, task) -> PassResult  # take up a pass that waited
    PassRunner.stop_pass(item, attempt) -> bool      # stop a worker left from a crash or given up
    PassRunner.interrupt() -> None                   # the kill switch, mid-pass

``CommandPassRunner`` runs a command per item (tests, examples, plain scripts).
``EnginePassRunner`` submits the loop's workflow to the task engine: each pass is a child
task of the loop run, whose end is written to the run's record with it.

The worker's words come back as ``note``; nothing reads them as a verdict.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Iterator, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from statewright._errors import InputError, PermanentError
from statewright._json_limits import loads_json_object, read_regular_file
from statewright._record import record
from statewright.executors._process import run_process
from statewright.loop._isolation import command_env
from statewright.loop.definition import CommandSpec
from statewright.loop.sources import WorkItem


class PassStatus(StrEnum):
    """Whether the worker came back with something to check (RETURNED), with nothing (NO
    RESULT), or, for a pass that is a child task of the run: the task ended and its end is in
    the run's record already (RECORDED), or it waits for a person (WAITING)."""

    RETURNED = "returned"
    NO_RESULT = "no_result"
    RECORDED = "recorded"
    WAITING = "waiting"


@record
class PassResult:
    """What a pass produced. ``cause`` says why there is no result. ``task_id`` names the
    pass's task (an engine pass); ``step`` and ``role``: where it waits for a person."""

    status: PassStatus
    note: str = ""
    cost_tokens: int = 0
    cost_usd: float = 0.0
    artifacts: tuple[str, ...] = ()
    receipts: tuple[str, ...] = ()
    cause: str = ""
    task_id: str = ""
    step: str = ""
    role: str = ""


class PassRunner(Protocol):
    """Works one item for one attempt. ``item.run_id`` names the run."""

    def run_pass(self, item: WorkItem, brief: str, attempt: int) -> PassResult: ...

    def await_pass(self, item: WorkItem, attempt: int, task_id: str) -> PassResult: ...

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
        self._pids: set[int] = set()  # the workers running now (a wave runs several at once)
        self._stopped: set[int] = set()  # those the kill switch stopped

    def _file(self, item: WorkItem, attempt: int, suffix: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", pass_key(item, attempt))
        return self.state_dir / f"{safe}.{suffix}"

    def run_pass(self, item: WorkItem, brief: str, attempt: int) -> PassResult:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        pid_file = self._file(item, attempt, "pid")
        scratch = Path(tempfile.mkdtemp(prefix="statewright-pass-"))
        result_file = scratch / "result.json"
        pids: list[int] = []

        def started(pid: int) -> None:
            pids.append(pid)
            self._pids.add(pid)
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
            self._pids.difference_update(pids)
            pid_file.unlink(missing_ok=True)
            shutil.rmtree(scratch, ignore_errors=True)
        note = done.stdout.strip()
        if self._stopped.intersection(pids):
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

    def await_pass(self, item: WorkItem, attempt: int, task_id: str) -> PassResult:
        """A command's pass never waits on a task: nothing to take up again."""
        return PassResult(PassStatus.NO_RESULT, cause=f"a command's pass has no task {task_id} to wait on")

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
        for pid in tuple(self._pids):
            self._stopped.add(pid)
            _kill_group(pid)


class EnginePassRunner:
    """Run the loop's workflow in the task engine: each pass is a child task of the loop run.

    The task records the run's stream as its parent (the pass's item and attempt in that
    reference) and the pass key as its idempotency key, so a repeated submit finds the same
    task. When the task ends, however it ends, the run's ``PassEnded`` is written in the same
    commit as the task's last event (``runtime.children``): the pass's result is in the run's
    record already, and ``run_pass`` says so (RECORDED). A task that waits for a person is
    WAITING: the run waits in RUNNING on its end (``await_pass`` takes it up again), never
    "no result". A halted task is the pass's "no result" and is cancelled at once: no retry of
    it can take effect after the loop moved on. ``stop_pass`` cancels the pass's live task
    (the run stopped or gave the pass up), so nobody can approve it into effect after the loop
    moved on. The engine is imported lazily, so the loop layer works without it.
    """

    def __init__(self, db_path: str | Path, workflow_path: str | Path) -> None:
        self.db_path = str(db_path)
        self.workflow_path = str(workflow_path)

    def run_pass(self, item: WorkItem, brief: str, attempt: int) -> PassResult:
        from statewright.machine.children import ParentRef

        with self._engine() as engine:
            task_id = engine.submit(
                self.workflow_path,
                {"item": dict(item.data), "brief": brief, "attempt": attempt},
                key=pass_key(item, attempt),
                parent=ParentRef(run_stream(item.run_id), item.id, attempt),
            )
            return self._work(engine, item, attempt, task_id)

    def await_pass(self, item: WorkItem, attempt: int, task_id: str) -> PassResult:
        with self._engine() as engine:
            return self._work(engine, item, attempt, task_id)

    def stop_pass(self, item: WorkItem, attempt: int) -> bool:
        """Cancel the live task of this pass, if any (a halted one too: a retry must not
        bring it back). True when one was cancelled."""
        with self._engine() as engine:
            task_id = engine.store.task_by_key(pass_key(item, attempt))
            return task_id is not None and _cancel(engine, item, attempt, task_id)

    def interrupt(self) -> None:
        return None

    @contextlib.contextmanager
    def _engine(self) -> Iterator[Any]:
        from statewright.runtime.engine import Engine  # lazy: the engine is optional here

        engine = Engine.open(self.db_path)
        try:
            yield engine
        finally:
            engine.close()

    @staticmethod
    def _work(engine: Any, item: WorkItem, attempt: int, task_id: str) -> PassResult:
        """Work the task here until it ends or waits for a person; a failure on the way
        cancels it (its end, with the pass's "no result", is then in the run's record)."""
        from statewright.machine.state import TaskStatus
        from statewright.runtime.run import run_task

        state = engine.state(task_id)
        if not state.terminal and state.status is not TaskStatus.AWAITING_APPROVAL:
            try:
                state = run_task(engine, task_id)
            except Exception:
                _cancel(engine, item, attempt, task_id)
                raise
        status = str(state.status)
        note = f"task {task_id} {status}"
        if state.status is TaskStatus.HALTED:  # the pass is "no result": a retry is a new pass, not this task
            _cancel(engine, item, attempt, task_id)
        if state.terminal:
            return PassResult(PassStatus.RECORDED, note, task_id=task_id)
        step = state.current.step if state.current is not None else ""
        role = ""
        if step:
            role = state.workflow.step(step).approvers_role or ""
        cause = f"task {task_id} waits for approval at {step!r}" if step else f"task {task_id} is {status}"
        return PassResult(PassStatus.WAITING, note, cause=cause, task_id=task_id, step=step, role=role)


def cancel_pass_task(store: Any, item: WorkItem, attempt: int) -> bool:
    """Cancel the live task of a pass of a run no process drives (``loop stop`` of a run that
    sleeps on it), through ``store`` (the caller's: not closed here). True when one was."""
    from statewright.runtime.engine import Engine  # lazy: the engine is optional here

    task_id = store.task_by_key(pass_key(item, attempt))
    return task_id is not None and _cancel(Engine(store), item, attempt, task_id)


def run_stream(run_id: str) -> str:
    """The stream id of loop run ``run_id`` (its child tasks name it as their parent)."""
    from statewright.machine.seam import RUN_STREAM_PREFIX

    return f"{RUN_STREAM_PREFIX}{run_id}"


def _cancel(engine: Any, item: WorkItem, attempt: int, task_id: str) -> bool:
    """Cancel the pass's task for its loop run, unless it has ended (completed or cancelled)."""
    from statewright._errors import IllegalEventError
    from statewright.machine.events import TaskCancelled
    from statewright.machine.fanout import LOOP_ACTOR
    from statewright.machine.state import TaskStatus

    state = engine.state(task_id)
    if state.status in (TaskStatus.COMPLETED, TaskStatus.COMPLETED_EARLY, TaskStatus.CANCELLED):
        return False
    reason = f"loop run {item.run_id} stopped the pass of item {item.id} attempt {attempt}"
    event = TaskCancelled(event_id=f"{task_id}:cancel:loop", at_ms=engine.clock.now_ms(), actor=LOOP_ACTOR,
                          reason=reason, by_parent=run_stream(item.run_id))
    try:
        applied = engine.apply(task_id, event, state=state)
    except IllegalEventError:
        return False  # not the run's child (a task an earlier release started): left to its operator
    return not applied.duplicate


def _kill_group(pid: int) -> bool:
    """SIGKILL the process group led by ``pid``. True if something was there to kill."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


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
