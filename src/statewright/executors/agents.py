"""ai steps: one agent turn, whose verdict comes only through a typed channel.

    type: python    ``module:function`` called with ``(brief, ctx)``; returns
                    ``{verdict, artifacts?, note?, cost?}``
    type: command   any CLI agent; the brief is a JSON file (``STATEWRIGHT_BRIEF``) and
                    stdin; the verdict is the JSON file the agent writes at
                    ``STATEWRIGHT_VERDICT``; stdout is the note, never the verdict;
                    the task's state is ``STATEWRIGHT_STATE`` and argv references
                    (``{input.x}``) are resolved as a code step's are
    type: openai    an OpenAI-compatible chat completions server, verdict by tool call
                    (see ``openai_agent``)

A verdict is checked against the step's schema, closed so that unknown fields fail. A
turn without a schema-valid verdict is ``error="no_verdict"`` with the reason in
``detail``. When the step has no schema (``schema=None``) the verdict is optional: a turn
that ran cleanly and gave none succeeds with ``verdict=None``; one it gave must be a JSON
object (else ``no_verdict``) and is the step's result as a checked verdict is.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._errors import ExecutorError, InputError, PermanentError
from .._json_limits import read_regular_file
from .._jsonsafe import MAX_JSON_BYTES, MAX_JSON_INT
from ._process import run_process
from ._spec import (
    DEFAULT_COMMAND_TIMEOUT_SECONDS,
    DEFAULT_MODEL_TIMEOUT_SECONDS,
    load_callable,
    require_valid,
    resolve_timeout,
    validate_agent_spec,
)
from ._state import resolved_argv, state_exchange
from ._verdict import AnyVerdict, VerdictSchema
from .base import AgentResult, Cost, ExecContext, Reason, cut_output

_RESULT_KEYS = frozenset({"verdict", "artifacts", "note", "cost"})
_COST_KEYS = frozenset({"tokens_in", "tokens_out", "money_usd"})
MAX_VERDICT_BYTES = MAX_JSON_BYTES  # the verdict file is read up to this size


def run_agent(
    spec: Mapping[str, Any],
    brief: Mapping[str, Any],
    schema: Mapping[str, Any] | None,
    ctx: ExecContext,
) -> AgentResult:
    """Run one agent turn for an ai step and return its (checked) verdict or a failure."""
    require_valid(validate_agent_spec(spec), f"task {ctx.task_id} step {ctx.step!r} agent")
    kind = spec["type"]
    if kind == "python":
        return run_python_agent(spec, brief, schema, ctx)
    if kind == "command":
        return run_command_agent(spec, brief, schema, ctx)
    if kind == "remote":  # the worker parks it for a remote agent (runtime/remote.py); never run here
        msg = f"task {ctx.task_id} step {ctx.step!r}: a remote agent's turn is run by 'statewright agent', not here"
        raise PermanentError(msg, reason=Reason.INVALID_SPEC)
    from .openai_agent import run_openai_agent  # httpx is an optional extra

    return run_openai_agent(spec, brief, schema, ctx)


def run_python_agent(
    spec: Mapping[str, Any],
    brief: Mapping[str, Any],
    schema: Mapping[str, Any] | None,
    ctx: ExecContext,
) -> AgentResult:
    """Call ``spec['callable']`` with ``(brief, ctx)`` in this process.

    The callable gets a copy of the brief and a context whose ``timeout_seconds`` is the
    step's; an in-process call cannot be interrupted, so the timeout is advisory here
    (use ``type: command`` for a hard limit). A TransientError or PermanentError it
    raises propagates to the worker's retry policy; any other exception is the
    attempt's failure (``error="exception"``, traceback in the artifacts).
    """
    verdicts = VerdictSchema(schema) if schema is not None else None
    timeout = resolve_timeout(spec, ctx.timeout_seconds, DEFAULT_MODEL_TIMEOUT_SECONDS)
    fn = load_callable(spec["callable"])
    brief_copy = json.loads(json.dumps(brief))
    started = time.monotonic()
    try:
        returned = fn(brief_copy, dataclasses.replace(ctx, timeout_seconds=timeout))
    except ExecutorError:
        raise  # TransientError / PermanentError: the worker's retry policy decides
    except Exception as exc:
        seconds = time.monotonic() - started
        message = traceback.format_exception_only(exc)[-1].strip()  # the traceback's last line
        return AgentResult(
            verdict=None,
            artifacts={"traceback": cut_output(traceback.format_exc())},
            cost=Cost(seconds=seconds),
            error=Reason.EXCEPTION,
            detail=f"{message} (raised by agent callable {spec['callable']!r}; the traceback is an artifact)",
        )
    seconds = time.monotonic() - started
    return _python_result(returned, verdicts, seconds, spec["callable"])


def _python_result(
    returned: object, verdicts: VerdictSchema | None, seconds: float, ref: str
) -> AgentResult:
    def bad(detail: str) -> AgentResult:
        return AgentResult(
            verdict=None, cost=Cost(seconds=seconds), error=Reason.NO_VERDICT,
            detail=f"agent callable {ref!r}: {detail}",
        )

    if not isinstance(returned, dict):
        return bad(f"must return a dict with a 'verdict'; returned {type(returned).__name__}")
    unknown = sorted(str(k) for k in returned if k not in _RESULT_KEYS)
    if unknown:
        return bad(f"returned unknown key(s) {', '.join(unknown)}; "
                   f"allowed: {', '.join(sorted(_RESULT_KEYS))}")
    artifacts = returned.get("artifacts", {})
    if not isinstance(artifacts, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in artifacts.items()
    ):
        return bad("'artifacts' must map names to strings")
    note = returned.get("note", "")
    if not isinstance(note, str):
        return bad(f"'note' must be a string; got {type(note).__name__}")
    cost = _cost_from(returned.get("cost", {}), seconds)
    if cost is None:
        return bad(f"'cost' may hold only {', '.join(sorted(_COST_KEYS))}, as numbers")
    given = returned.get("verdict")
    if verdicts is None and given is None:  # without a schema a verdict is optional
        return AgentResult(verdict=None, artifacts=artifacts, cost=cost, note=note)
    checked = (verdicts or AnyVerdict()).check(given)
    if checked.verdict is None:
        return AgentResult(
            verdict=None, artifacts=artifacts, cost=cost, note=note,
            error=checked.reason, detail=str(checked.problem),
        )
    return AgentResult(verdict=checked.verdict, artifacts=artifacts, cost=cost, note=note)


def _cost_from(raw: object, seconds: float) -> Cost | None:
    if not isinstance(raw, dict) or any(k not in _COST_KEYS for k in raw):
        return None
    values = {k: raw.get(k, 0) for k in _COST_KEYS}
    if not all(_count_like(v) for v in values.values()):
        return None
    return Cost(
        tokens_in=int(values["tokens_in"]),
        tokens_out=int(values["tokens_out"]),
        money_usd=float(values["money_usd"]),
        seconds=seconds,
    )


def _count_like(value: object) -> bool:
    """A number a cost may hold: finite, not negative, within 64 bits (NaN is not JSON)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and 0 <= value <= MAX_JSON_INT


def run_command_agent(
    spec: Mapping[str, Any],
    brief: Mapping[str, Any],
    schema: Mapping[str, Any] | None,
    ctx: ExecContext,
) -> AgentResult:
    """Run a CLI agent in ``ctx.workspace`` and read the verdict file it writes.

    Environment: ``ctx.base_env()`` plus ``STATEWRIGHT_STATE`` (the task's state, as a code
    step gets it), ``STATEWRIGHT_BRIEF`` (the brief's JSON file),
    ``STATEWRIGHT_VERDICT`` (where to write the verdict JSON) and, when the step has a
    schema, ``STATEWRIGHT_SCHEMA`` (its JSON file, which ``statewright mcp-verdict``
    reads). The files live in a private temporary directory outside the workspace, so
    they never show up in the attempt's diff.
    """
    verdicts = VerdictSchema(schema) if schema is not None else None
    timeout = resolve_timeout(spec, ctx.timeout_seconds, DEFAULT_COMMAND_TIMEOUT_SECONDS)
    brief_text = json.dumps(brief, indent=2, sort_keys=True, ensure_ascii=False)
    try:
        argv = resolved_argv(spec, ctx)
    except ValueError as exc:
        return AgentResult(verdict=None, error=Reason.MISSING_REFERENCE, detail=str(exc))
    with state_exchange(ctx, "statewright-agent-") as (io_dir, state_env):
        brief_path = io_dir / "brief.json"
        verdict_path = io_dir / "verdict.json"
        brief_path.write_text(brief_text, encoding="utf-8")
        env = {**ctx.base_env(), **state_env}
        env["STATEWRIGHT_BRIEF"] = str(brief_path)
        env["STATEWRIGHT_VERDICT"] = str(verdict_path)
        if verdicts is not None:
            schema_path = io_dir / "schema.json"
            schema_path.write_text(json.dumps(verdicts.schema, indent=2), encoding="utf-8")
            env["STATEWRIGHT_SCHEMA"] = str(schema_path)
        outcome = run_process(
            argv, cwd=ctx.workspace, env=env, timeout_seconds=timeout, stdin_text=brief_text,
        )
        verdict_text, unreadable = _read_verdict_file(verdict_path)
        written = os.path.lexists(verdict_path)

    artifacts = {"stdout": outcome.stdout, "stderr": outcome.stderr}
    base = AgentResult(
        verdict=None, artifacts=artifacts, cost=Cost(seconds=outcome.seconds), note=outcome.stdout
    )
    if outcome.timed_out:
        detail = f"the agent ran longer than {timeout:g}s; its process group was killed"
        return dataclasses.replace(base, error=Reason.TIMEOUT, detail=detail)
    if outcome.returncode != 0:
        detail = f"the agent exited with status {outcome.returncode}; see the stderr artifact"
        return dataclasses.replace(base, error=Reason.EXIT_STATUS, detail=detail)
    if verdicts is None and not written:  # without a schema a verdict is optional
        return base
    if verdict_text is None:
        return dataclasses.replace(base, error=unreadable[0], detail=unreadable[1])
    checked = (verdicts or AnyVerdict()).check_text(verdict_text)
    if checked.verdict is None:
        return dataclasses.replace(base, error=checked.reason, detail=str(checked.problem))
    return dataclasses.replace(base, verdict=checked.verdict)


def _read_verdict_file(path: Path) -> tuple[str | None, tuple[Reason, str]]:
    """The verdict file's text, or None and why there is none to read. The agent controls
    the path: it is read as any outside file is (``read_regular_file``: no link followed, no
    blocking on a FIFO, a regular file only), at most MAX_VERDICT_BYTES."""
    if not os.path.lexists(path):
        return None, (Reason.NO_VERDICT, "the agent wrote no verdict file at $STATEWRIGHT_VERDICT (stdout is not read)")
    try:
        data = read_regular_file(path, "the verdict file at $STATEWRIGHT_VERDICT", MAX_VERDICT_BYTES,
                                 follow_links=False)
    except InputError as exc:
        return None, (Reason.NO_VERDICT, str(exc))
    if len(data) > MAX_VERDICT_BYTES:
        return None, (Reason.OUTPUT_TOO_LARGE, f"the verdict file is larger than {MAX_VERDICT_BYTES} bytes")
    try:
        return data.decode("utf-8"), (Reason.NO_VERDICT, "")
    except UnicodeDecodeError:
        return None, (Reason.NO_VERDICT, "the verdict file is not UTF-8 text")
