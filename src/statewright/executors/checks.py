"""Checks (wait steps, loop oracles): a command, an HTTP probe or a Python callable.

    check: {command: [gh, pr, checks, "42"], timeout: 30s}
    check: {http: "http://127.0.0.1:9000/health", expect_status: 200,
            json_path: "$.state", equals: "green"}
    check: {callable: "mypkg.checks:canary_ok"}

A check never raises for its own trouble and never passes by accident: a command that
cannot start, a refused connection, a body that is not JSON, a callable that raises or
returns the wrong shape, a timeout, even a malformed spec, all give ``passed=False``
with a reason code and a detail that says what happened.

HTTP: a GET; the status must equal ``expect_status`` (default 200). With ``json_path``
the body must be JSON and the path must exist; with ``equals`` too, the value there
must equal it as JSON (``true`` is not ``1``). Without ``equals`` the value must be
neither ``null`` nor ``false``. The timeout bounds each network wait.

A command check gets the task's state as a step's command does (``STATEWRIGHT_STATE``, and
argv references such as ``{results.deploy.url}``); a reference that names nothing is
``passed=False`` with reason ``missing_reference``, and the wait step fails at once (the
state does not change while it waits, so checking again cannot help). An HTTP check whose
``json_path`` hands back the JSON body it read as ``body``: it becomes part of the wait
step's result.

A callable is called with ``(ctx)`` and returns ``True``/``False`` or
``{"passed": bool, "detail"?: str}``. Whatever it raises, TransientError included, is a
failed check: a wait step's budget counts checks, and an error is one that did not pass.
"""

from __future__ import annotations

import dataclasses
import json
import traceback
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._errors import ExecutorError
from .._jsonsafe import loads_plain
from ._jsonpath import json_equal, parse_json_path, resolve_json_path
from ._process import run_process
from ._spec import (
    DEFAULT_CHECK_TIMEOUT_SECONDS,
    load_callable,
    resolve_timeout,
    validate_check_spec,
)
from ._state import resolved_argv, state_exchange
from .base import CheckResult, ExecContext, Reason, cut_output

MAX_BODY_BYTES = 1_000_000
BODY_EXCERPT_CHARS = 2_000


def run_check(spec: Mapping[str, Any], ctx: ExecContext) -> CheckResult:
    """Perform one check. Errors and timeouts come back as ``passed=False``."""
    problems = validate_check_spec(spec)
    if problems:
        return CheckResult(False, "invalid check spec: " + "; ".join(problems),
                           reason=Reason.INVALID_SPEC)
    timeout = resolve_timeout(spec, ctx.timeout_seconds, DEFAULT_CHECK_TIMEOUT_SECONDS)
    try:
        if "command" in spec:
            return _command_check(spec, ctx, timeout)
        if "http" in spec:
            return _http_check(spec, timeout)
        return _callable_check(spec["callable"], dataclasses.replace(ctx, timeout_seconds=timeout))
    except ExecutorError as exc:
        return CheckResult(False, str(exc), reason=exc.reason)


def _command_check(spec: Mapping[str, Any], ctx: ExecContext, timeout: float) -> CheckResult:
    try:
        argv = resolved_argv(spec, ctx)
    except ValueError as exc:
        return CheckResult(False, str(exc), reason=Reason.MISSING_REFERENCE)
    with state_exchange(ctx, "statewright-check-") as (_, state_env):
        return run_command_check(argv, cwd=ctx.workspace, env={**ctx.base_env(), **state_env}, timeout=timeout)


def run_command_check(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float, merge_stderr: bool = False,
) -> CheckResult:
    """The one command check, for a wait step and for the outer loop's checks and goal oracles:
    exit status 0 passes, any other fails, a process that outlives ``timeout`` is killed with
    its group and fails as a timeout; one that cannot start raises ExecutorError (the caller
    says what that is). The output keeps its end (``cut_output``): stdout then stderr, or as
    written with ``merge_stderr``."""
    outcome = run_process(argv, cwd=cwd, env=env, timeout_seconds=timeout, merge_stderr=merge_stderr)
    output = cut_output("\n".join(s for s in (outcome.stdout, outcome.stderr) if s))
    if outcome.timed_out:
        detail = f"the check ran longer than {timeout:g}s; its process group was killed"
        return CheckResult(False, detail, output, Reason.TIMEOUT)
    if outcome.returncode != 0:
        return CheckResult(False, f"exit status {outcome.returncode}", output, Reason.EXIT_STATUS)
    return CheckResult(True, "exit status 0", output)


def _http_check(spec: Mapping[str, Any], timeout: float) -> CheckResult:
    url = spec["http"]
    expected = spec.get("expect_status", 200)
    request = urllib.request.Request(
        url, headers={"Accept": "application/json", "User-Agent": "statewright"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, body = response.status, response.read(MAX_BODY_BYTES)
    except urllib.error.HTTPError as exc:
        with exc:
            status, body = exc.code, exc.read(MAX_BODY_BYTES)
    except (urllib.error.URLError, OSError) as exc:
        cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(cause, TimeoutError):
            return CheckResult(False, f"GET {url}: no answer within {timeout:g}s",
                               reason=Reason.TIMEOUT)
        return CheckResult(False, f"GET {url} failed: {cause}", reason=Reason.ERROR)
    text = body.decode("utf-8", "replace")
    excerpt = text[:BODY_EXCERPT_CHARS]
    if status != expected:
        return CheckResult(False, f"GET {url}: status {status}, expected {expected}", excerpt,
                           Reason.HTTP_STATUS)
    if "json_path" not in spec:
        return CheckResult(True, f"GET {url}: status {status}", excerpt)
    path = spec["json_path"]
    document, problem = loads_plain(text)
    if problem is not None:
        return CheckResult(False, f"GET {url}: body is not JSON ({problem.message}), so {path} cannot hold",
                           excerpt, Reason.PREDICATE)
    found, value = resolve_json_path(document, parse_json_path(path))
    if not found:
        return CheckResult(False, f"GET {url}: {path} is not in the body", excerpt,
                           Reason.PREDICATE, document)
    shown = json.dumps(value)[:200]
    if "equals" in spec:
        wanted = spec["equals"]
        if json_equal(value, wanted):
            return CheckResult(True, f"GET {url}: {path} == {shown}", excerpt, body=document)
        return CheckResult(False, f"GET {url}: {path} is {shown}, expected {json.dumps(wanted)}",
                           excerpt, Reason.PREDICATE, document)
    if value is None or value is False:
        return CheckResult(False, f"GET {url}: {path} is {shown}", excerpt, Reason.PREDICATE, document)
    return CheckResult(True, f"GET {url}: {path} is {shown}", excerpt, body=document)


def _callable_check(ref: str, ctx: ExecContext) -> CheckResult:
    fn = load_callable(ref)
    try:
        returned = fn(ctx)
    except Exception:
        return CheckResult(False, f"check callable {ref!r} raised",
                           cut_output(traceback.format_exc()), Reason.EXCEPTION)
    if isinstance(returned, bool):
        return CheckResult(returned, f"check callable {ref!r} returned {returned}",
                           reason=None if returned else Reason.FAILED)
    if (
        isinstance(returned, dict)
        and isinstance(returned.get("passed"), bool)
        and isinstance(returned.get("detail", ""), str)
        and set(returned) <= {"passed", "detail"}
    ):
        passed = returned["passed"]
        return CheckResult(passed, returned.get("detail", ""),
                           reason=None if passed else Reason.FAILED)
    detail = (
        f"check callable {ref!r} must return a bool or {{'passed': bool, 'detail': str}}; "
        f"returned {type(returned).__name__}"
    )
    return CheckResult(False, detail, reason=Reason.BAD_RETURN)
