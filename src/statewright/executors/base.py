"""The one narrow seam between the engine and the outside world.

The worker builds an ExecContext for every command it performs and calls one of
three functions in ``statewright.executors``:

    run_agent(spec, brief, schema, ctx) -> AgentResult     # ai steps
    run_code(spec, ctx) -> CodeResult                      # code steps
    run_check(spec, ctx) -> CheckResult                    # wait steps (and loop oracles)

Executors raise TransientError for retryable trouble (timeouts of the transport,
HTTP 429/5xx, a dropped connection) and PermanentError for what retrying cannot fix.
Anything the step itself got wrong (a failing command, a missing verdict) is *not*
an exception: it comes back as a result with ``ok=False`` / ``passed=False`` and a
reason code, and the reducer routes it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from statewright._record import record

# Output kept per stream: the last OUTPUT_LIMIT_CHARS characters (the end is where the
# failing assertion or the traceback is).
OUTPUT_LIMIT_CHARS = 20_000


def cut_output(text: str, limit: int = OUTPUT_LIMIT_CHARS) -> str:
    """The last ``limit`` characters, with a marker saying how much was cut. Here, not in
    _process.py, so that a Python callable's step does not import the process machinery."""
    if len(text) <= limit:
        return text
    return f"[... {len(text) - limit} earlier characters cut ...]\n" + text[-limit:]


def _nothing() -> Mapping[str, Any]:
    return MappingProxyType({})


@record
class Cost:
    """What one attempt cost. Adapters fill what they know."""

    tokens_in: int = 0
    tokens_out: int = 0
    money_usd: float = 0.0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "money_usd": self.money_usd,
            "seconds": self.seconds,
        }


#: Variables of the worker a step's process gets, when the worker has them.
STEP_BASE_VARS = ("PATH", "LANG", "LC_ALL", "TZ")


def step_base_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The worker's PATH, LANG, LC_ALL and TZ (those it has; ``environ`` defaults to this
    process's): all a step gets unasked. HOME and TMPDIR are added per process
    (``_process.run_process``)."""
    source = os.environ if environ is None else environ
    env = {name: source[name] for name in STEP_BASE_VARS if name in source}
    env.setdefault("PATH", os.defpath)
    return env


@record
class ExecContext:
    """Everything an executor may know about the command it performs.

    ``env`` holds only what the step declared (its ``env:`` values and the values of its
    ``secrets:``), never the worker's own environment; ``deliveries`` counts how often the
    command was handed to a worker (more than 1: an earlier delivery may have started the
    work under the same idempotency key). ``input`` is the task's input and ``results`` the
    results of the steps that have run (``results["STEP"]``), both read-only copies.
    """

    task_id: str
    step: str
    attempt: int
    idempotency_key: str
    workspace: Path
    timeout_seconds: float | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    deliveries: int = 1
    input: Mapping[str, Any] = field(default_factory=_nothing)
    results: Mapping[str, Mapping[str, Any]] = field(default_factory=_nothing)

    @property
    def redelivered(self) -> bool:
        """Whether an earlier delivery of this command may have started it."""
        return self.deliveries > 1

    def base_env(self) -> dict[str, str]:
        """A command step's whole environment: the minimal base (``step_base_env``), the
        step's declared variables, and the STATEWRIGHT_* step variables."""
        out = step_base_env()
        out.update(self.env)
        out.update(
            {
                "STATEWRIGHT_TASK_ID": self.task_id,
                "STATEWRIGHT_STEP": self.step,
                "STATEWRIGHT_ATTEMPT": str(self.attempt),
                "STATEWRIGHT_IDEMPOTENCY_KEY": self.idempotency_key,
                "STATEWRIGHT_WORKSPACE": str(self.workspace),
                "STATEWRIGHT_DELIVERIES": str(self.deliveries),
            }
        )
        if self.redelivered:
            out["STATEWRIGHT_REDELIVERED"] = "1"
        return out


@record
class AgentResult:
    """One agent turn: the verdict (only ever from the typed channel), artifacts,
    cost, and the agent's own words kept as a note (never read as a verdict).
    ``error`` is a reason code when the turn produced no usable verdict
    (``no_verdict``, ``timeout``, ``exit_status``, ``protected_path_modified``)."""

    verdict: Mapping[str, Any] | None
    artifacts: Mapping[str, str] = field(default_factory=dict)
    cost: Cost = Cost()
    note: str = ""
    error: str | None = None
    detail: str = ""


@record
class CodeResult:
    """A deterministic step's outcome; ``output`` is kept (cut) for loop-back briefs;
    ``result`` is the step's output object, kept in the task's state."""

    ok: bool
    output: str = ""
    artifacts: Mapping[str, str] = field(default_factory=dict)
    reason: str | None = None
    cost: Cost = Cost()
    result: Mapping[str, Any] | None = None


@record
class CheckResult:
    """A check's outcome. An error or a timeout is ``passed=False``, never a pass. ``body`` is
    an HTTP check's answer when it was plain JSON (None otherwise, and for a JSON null)."""

    passed: bool
    detail: str = ""
    output: str = ""
    reason: str | None = None
    body: Any = None


class Reason(StrEnum):
    """Why an attempt, a code step or a check did not succeed.

    The one vocabulary for ``AgentResult.error``, ``CodeResult.reason`` and
    ``CheckResult.reason`` (and ``ExecutorError.reason``).
    """

    NO_VERDICT = "no_verdict"  # no schema-valid verdict came through the typed channel
    TIMEOUT = "timeout"  # the step ran out of time; its process group was killed
    EXIT_STATUS = "exit_status"  # the command exited non-zero
    PROTECTED_PATH_MODIFIED = "protected_path_modified"  # the diff touches a protected path
    FAILED = "failed"  # an in-process callable reported failure (returned False / ok: False)
    EXCEPTION = "exception"  # an in-process callable raised
    BAD_RETURN = "bad_return"  # an in-process callable returned the wrong shape
    HTTP_STATUS = "http_status"  # an HTTP check got an unexpected status
    PREDICATE = "predicate"  # an HTTP check's JSON-path predicate did not hold
    ERROR = "error"  # the check could not be performed (connection, bad spec, ...)
    INVALID_SPEC = "invalid_spec"  # the step's spec is malformed
    NOT_FOUND = "not_found"  # the command or callable does not exist
    THROTTLED = "throttled"  # HTTP 429 from a model server
    SERVER_ERROR = "server_error"  # HTTP 5xx from a model server
    CONNECTION = "connection"  # the model server could not be reached
    BAD_RESPONSE = "bad_response"  # the model server's reply breaks the wire format
    MISSING_CREDENTIAL = "missing_credential"  # the API key variable is not set
    INVALID_VERDICT = "invalid_verdict"  # a verdict that is not plain JSON or breaks the schema
    OUTPUT_TOO_LARGE = "output_too_large"  # a verdict or the report is over its size limit
    INVALID_OUTPUT = "invalid_output"  # output other than the verdict that cannot be stored
    HANDLING_ERROR = "handling_error"  # recording the outcome failed; the attempt failed instead
    CONFLICT = "conflict"  # the effect's target refused: its record changed since the proposal
    WORKER_DIED = "worker_died"  # every worker that started the command died before reporting
    MISSING_REFERENCE = "missing_reference"  # an argv reference names no value (or none an argument can hold)
