"""code steps: a command (exit 0 is ok) or a Python callable ``(ctx) -> bool | dict``.

    run: {command: [pytest, -q], timeout: 10m}
    run: {callable: "mypkg.steps:publish"}

A command runs in ``ctx.workspace`` with ``ctx.base_env()``; its output is stdout then
stderr, cut to the last ``OUTPUT_LIMIT_CHARS`` characters. A timeout kills the command's
whole process group (reason ``timeout``); a non-zero exit is ``exit_status``, except the
status the spec names as ``conflict_exit``: ``conflict`` (the effect's target refused the
write because its record changed since the proposal; a callable raises ConflictError).

A callable returns ``True``/``False`` or ``{"ok": bool, "output"?: str | object,
"artifacts"?: {name: str}}``; a false one is reason ``failed``. An ``output`` that is a
mapping is the step's result (``ok`` may then be left out: it is true); one that is a
string is text, as before. Anything else is
``bad_return``; raising is ``exception`` with the traceback as output, except that a
TransientError or PermanentError propagates to the worker's retry policy (a throttled
API is a command to retry, not a failed step). An in-process call cannot be
interrupted: the resolved timeout is passed as ``ctx.timeout_seconds`` for the callable
to honour.

Data flows through the task: a callable reads ``ctx.input`` and ``ctx.results``; a command
reads the JSON file named by ``STATEWRIGHT_STATE`` (``{"input": ..., "results": {...}}``),
gets references in its argv resolved (``{results.analyse.iban}``, see
``definition.references``; one that names nothing fails the attempt with
``missing_reference`` before the command starts), and may write its result, a JSON object,
to the file named by ``STATEWRIGHT_OUTPUT``. Both files live in a directory made for the
attempt and removed after it. The output file is read without following a link or blocking
on a FIFO, at most ``MAX_OUTPUT_FILE_BYTES``; one that is not a JSON object fails the
attempt (``invalid_output``), one too large ``output_too_large``. The worker screens the
result again (the step's ``result_limit``) and the reducer checks it against the step's
``output_schema`` before it is recorded.
"""

from __future__ import annotations

import dataclasses
import os
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._errors import ExecutorError, InputError
from .._json_limits import loads_json_object, read_regular_file
from ..definition.limits import MAX_RESULT_LIMIT_BYTES
from ._spec import (
    DEFAULT_COMMAND_TIMEOUT_SECONDS,
    load_callable,
    require_valid,
    resolve_timeout,
    validate_code_spec,
)
from .base import CodeResult, Cost, ExecContext, Reason, cut_output

#: Specs already checked, by identity: a step's spec object is checked once per process, not
#: once per attempt (the spec is kept alive here, so an id is never reused for another one).
_CHECKED: dict[int, Mapping[str, Any]] = {}
_CHECKED_LIMIT = 4096

#: Bytes read of the file a command step writes its result to (``STATEWRIGHT_OUTPUT``); the
#: step's own ``result_limit`` is applied when the result is screened.
MAX_OUTPUT_FILE_BYTES = MAX_RESULT_LIMIT_BYTES


def _check_once(spec: Mapping[str, Any], ctx: ExecContext) -> None:
    if _CHECKED.get(id(spec)) is spec:
        return
    require_valid(validate_code_spec(spec), f"task {ctx.task_id} step {ctx.step!r} run")
    if len(_CHECKED) >= _CHECKED_LIMIT:
        _CHECKED.clear()
    _CHECKED[id(spec)] = spec


def run_code(spec: Mapping[str, Any], ctx: ExecContext) -> CodeResult:
    """Run a code step's command or callable and say whether it succeeded."""
    _check_once(spec, ctx)
    timeout = resolve_timeout(spec, ctx.timeout_seconds, DEFAULT_COMMAND_TIMEOUT_SECONDS)
    if "callable" in spec:
        if ctx.timeout_seconds != timeout:
            ctx = dataclasses.replace(ctx, timeout_seconds=timeout)
        return _run_callable(spec["callable"], ctx)
    from ._state import resolved_argv, state_exchange  # here: a callable needs neither

    try:
        argv = resolved_argv(spec, ctx)
    except ValueError as exc:
        return CodeResult(False, f"[statewright: {exc}]", {}, Reason.MISSING_REFERENCE)
    with state_exchange(ctx, "statewright-data-") as (exchange, state_env):
        return _run_command(argv, ctx, timeout, exchange, state_env, spec.get("conflict_exit"))


def _run_command(
    argv: list[str], ctx: ExecContext, timeout: float, exchange: Path, state_env: Mapping[str, str],
    conflict_exit: object = None,
) -> CodeResult:
    from ._process import run_process

    output_path = exchange / "output.json"
    env = {**ctx.base_env(), **state_env, "STATEWRIGHT_OUTPUT": str(output_path)}
    outcome = run_process(argv, cwd=ctx.workspace, env=env, timeout_seconds=timeout)
    output = cut_output(_joined(outcome.stdout, outcome.stderr))
    cost = Cost(seconds=outcome.seconds)
    artifacts = {"stdout": outcome.stdout, "stderr": outcome.stderr}
    if outcome.timed_out:
        output = _joined(output, f"[statewright: killed after {timeout:g}s]")
        return CodeResult(False, output, artifacts, Reason.TIMEOUT, cost)
    if outcome.returncode != 0:
        output = _joined(output, f"[statewright: exit status {outcome.returncode}]")
        conflict = outcome.returncode == conflict_exit
        return CodeResult(False, output, artifacts, Reason.CONFLICT if conflict else Reason.EXIT_STATUS, cost)
    if not os.path.lexists(output_path):
        return CodeResult(True, output, artifacts, None, cost)
    what = "the step's output file (STATEWRIGHT_OUTPUT)"
    try:
        data = read_regular_file(output_path, what, MAX_OUTPUT_FILE_BYTES, follow_links=False)
        if len(data) > MAX_OUTPUT_FILE_BYTES:
            why = f"{what} is over {MAX_OUTPUT_FILE_BYTES:,} bytes"
            return CodeResult(False, _joined(output, f"[statewright: {why}]"), artifacts,
                              Reason.OUTPUT_TOO_LARGE, cost)
        result = loads_json_object(data, what, max_bytes=MAX_OUTPUT_FILE_BYTES)
    except InputError as exc:
        return CodeResult(False, _joined(output, f"[statewright: {exc}]"), artifacts, Reason.INVALID_OUTPUT, cost)
    return CodeResult(True, output, artifacts, None, cost, result)


def _run_callable(ref: str, ctx: ExecContext) -> CodeResult:
    fn = load_callable(ref)
    started = time.monotonic()
    try:
        returned = fn(ctx)
    except ExecutorError:
        raise  # TransientError / PermanentError: the worker's retry policy decides
    except Exception:
        cost = Cost(seconds=time.monotonic() - started)
        return CodeResult(False, cut_output(traceback.format_exc()), {}, Reason.EXCEPTION, cost)
    cost = Cost(seconds=time.monotonic() - started)
    if isinstance(returned, bool):
        return CodeResult(returned, "", {}, None if returned else Reason.FAILED, cost)
    if not isinstance(returned, dict):
        kind = type(returned).__name__
        output = f"code callable {ref!r} must return a bool or a dict with 'ok'; returned {kind}"
        return CodeResult(False, output, {}, Reason.BAD_RETURN, cost)
    problem = _dict_problem(returned)
    if problem is not None:
        return CodeResult(False, f"code callable {ref!r} {problem}", {}, Reason.BAD_RETURN, cost)
    ok = returned.get("ok", True)
    given = returned.get("output", "")
    result = given if isinstance(given, Mapping) else None
    output = "" if result is not None else cut_output(given)
    reason = None if ok else Reason.FAILED
    return CodeResult(ok, output, dict(returned.get("artifacts", {})), reason, cost, result)


def _dict_problem(returned: dict[Any, Any]) -> str | None:
    unknown = sorted(str(k) for k in returned if k not in {"ok", "output", "artifacts"})
    if unknown:
        return f"returned unknown key(s) {', '.join(unknown)}; allowed: artifacts, ok, output"
    output = returned.get("output", "")
    ok_given = "ok" in returned or not isinstance(output, Mapping)
    if ok_given and not isinstance(returned.get("ok"), bool):
        return f"must return 'ok' as a bool; got {type(returned.get('ok')).__name__}"
    if not isinstance(output, str | Mapping):
        return "must return 'output' as a string (text) or a mapping (the step's result)"
    artifacts = returned.get("artifacts", {})
    if not isinstance(artifacts, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in artifacts.items()
    ):
        return "must return 'artifacts' as a mapping of names to strings"
    return None


def _joined(*parts: str) -> str:
    return "\n".join(p.rstrip("\n") for p in parts if p)
