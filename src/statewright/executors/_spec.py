"""Step specs: their shapes, durations, timeouts and ``module:function`` callables.

The ``validate_*_spec`` functions are used at definition load time; each returns a list
of problems (empty when the spec is fine) phrased as "what is wrong, and what to do".
The executors call the same functions again before they run, so a spec that slipped
past load time fails as a PermanentError instead of doing something half-right.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from .._errors import PermanentError
from .._names import queue_name_problem
from ..definition.durations import parse_duration_seconds
from ._jsonpath import parse_json_path
from .base import Reason

# Used when neither the spec nor the ExecContext gives a timeout.
DEFAULT_COMMAND_TIMEOUT_SECONDS = 3600.0
DEFAULT_CHECK_TIMEOUT_SECONDS = 60.0
DEFAULT_MODEL_TIMEOUT_SECONDS = 600.0

AGENT_TYPES = ("command", "openai", "python", "remote")
TOOL_CHOICES = ("function", "required", "auto")

_CALLABLE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_duration(value: object) -> float:
    """Seconds in a timeout: the definition's durations (``90s``, ``10m``, ``2h``, ``2d``,
    ``500ms``, ``1h30m`` or a number of seconds), and greater than zero.

    Raises ValueError with a message that shows the value and the accepted forms.
    """
    seconds = parse_duration_seconds(value)
    if seconds <= 0:
        raise ValueError(f"a timeout must be greater than zero; got {value!r}")
    return seconds


def resolve_timeout(spec: Mapping[str, Any], ctx_timeout: float | None, default: float) -> float:
    """The spec's ``timeout``, else the context's, else the executor's default."""
    if "timeout" in spec:
        return parse_duration(spec["timeout"])
    if ctx_timeout is not None:
        return float(ctx_timeout)
    return default


def command_argv(spec: Mapping[str, Any]) -> list[str]:
    """The command as argv. A string is split like a shell would, but never run by one."""
    command = spec["command"]
    if isinstance(command, str):
        return shlex.split(command)
    return [str(part) for part in command]


_LOADED: dict[str, Callable[..., Any]] = {}
_LOADED_LIMIT = 4096


def load_callable(ref: str) -> Callable[..., Any]:
    """Import ``module:function`` (or ``module:Class.method``) from the worker's own path.

    A task's workspace is never importable: a module an agent wrote there must not run in
    the worker, for that task or any later one, so ``sys.path`` is used as the worker has it
    and never changed per task. Raises
    PermanentError when the module or the attribute is missing: retrying cannot fix a
    reference that does not resolve. A resolved reference is remembered; a module whose file
    changed since it was loaded is logged as a warning (the worker keeps running what it
    loaded).
    """
    fn = _LOADED.get(ref)
    if fn is None:
        fn = _load_callable(ref)
        if len(_LOADED) >= _LOADED_LIMIT:
            _LOADED.clear()
        _LOADED[ref] = fn
    _warn_if_changed(ref.partition(":")[0])
    return fn


def _load_callable(ref: str) -> Callable[..., Any]:
    module_name, _, attr_path = ref.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        msg = (
            f"callable {ref!r}: cannot import module {module_name!r} ({exc}); "
            "install it where the worker imports from (its PYTHONPATH)"
        )
        raise PermanentError(msg, reason=Reason.NOT_FOUND) from None
    _log_module(module_name, obj)
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            msg = f"callable {ref!r}: module {module_name!r} has no attribute path {attr_path!r}"
            raise PermanentError(msg, reason=Reason.NOT_FOUND) from None
    if not callable(obj):
        msg = f"callable {ref!r} names a {type(obj).__name__}, which cannot be called"
        raise PermanentError(msg, reason=Reason.NOT_FOUND)
    return obj  # type: ignore[no-any-return]


def _mtime(path: str | None) -> float | None:
    try:
        return os.stat(path).st_mtime if path else None
    except OSError:
        return None


def _shown_mtime(mtime: float | None) -> str:
    from datetime import datetime

    return "unknown" if mtime is None else datetime.fromtimestamp(mtime).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def _log_module(name: str, module: Any) -> None:
    """Say which file a step's code comes from, once per module: a worker keeps what it has
    imported, so a step edited after this line runs the old code until the worker restarts."""
    if name in _MODULE_FILES:
        return
    path = getattr(module, "__file__", None)
    mtime = _mtime(path)
    _MODULE_FILES[name] = (path, mtime)
    logging.getLogger("statewright.worker").info("step code %s loaded from %s (modified %s)", name, path,
                                                 _shown_mtime(mtime))


def _warn_if_changed(name: str) -> None:
    """A step module edited on disk after this worker loaded it: say so once per edit, as the
    step about to run is the old code."""
    path, loaded = _MODULE_FILES.get(name, (None, None))
    now = _mtime(path)
    if path is None or loaded is None or now is None or now == loaded or _WARNED.get(name) == now:
        return
    _WARNED[name] = now
    logging.getLogger("statewright.worker").warning(
        "step code %s changed on disk (%s modified %s) after this worker loaded it (modified %s); this worker "
        "runs the code it loaded: restart it to run the new code", name, path, _shown_mtime(now), _shown_mtime(loaded))


# What each step module was loaded from (file, modification time), and the edit last warned of.
_MODULE_FILES: dict[str, tuple[str | None, float | None]] = {}
_WARNED: dict[str, float] = {}


def require_valid(problems: list[str], where: str) -> None:
    """Raise PermanentError naming every problem, if there are any."""
    if problems:
        msg = f"{where}: invalid spec: " + "; ".join(problems)
        raise PermanentError(msg, reason=Reason.INVALID_SPEC)


# -- shape validation -------------------------------------------------------------------


def validate_agent_spec(spec: object) -> list[str]:
    """Problems with an ai step's ``agent:`` mapping (empty list when it is fine)."""
    if not isinstance(spec, Mapping):
        return [f"agent must be a mapping with a 'type'; got {_show(spec)}"]
    kind = spec.get("type")
    if kind not in AGENT_TYPES:
        return [f"agent 'type' must be one of {', '.join(AGENT_TYPES)}; got {_show(kind)}"]
    problems = _timeout_problems("agent", spec)
    if kind == "command":
        problems += _unknown_keys("agent", spec, {"type", "command", "timeout"})
        problems += _command_problems("agent", spec)
    elif kind == "python":
        problems += _unknown_keys("agent", spec, {"type", "callable", "timeout"})
        problems += _callable_problems("agent", spec)
    elif kind == "remote":
        problems += _remote_problems(spec)
    else:
        allowed = {"type", "base_url", "model", "api_key_env", "timeout", "temperature",
                   "max_tokens", "tool_choice"}
        problems += _unknown_keys("agent", spec, allowed)
        problems += _openai_problems(spec)
    return problems


def validate_code_spec(spec: object) -> list[str]:
    """Problems with a code step's ``run:`` mapping (empty list when it is fine)."""
    if not isinstance(spec, Mapping):
        return [f"run must be a mapping with 'command' or 'callable'; got {_show(spec)}"]
    problems = _unknown_keys("run", spec, {"command", "callable", "timeout", "conflict_exit"})
    problems += _timeout_problems("run", spec)
    problems += _one_of("run", spec, ("command", "callable"))
    if "conflict_exit" in spec:
        status = spec["conflict_exit"]
        if "command" not in spec:
            problems.append("run 'conflict_exit' applies to a 'command' (a callable raises ConflictError)")
        elif isinstance(status, bool) or not isinstance(status, int) or not 1 <= status <= 255:
            problems.append(f"run 'conflict_exit' must be an exit status from 1 to 255; got {_show(status)}")
    if "command" in spec:
        problems += _command_problems("run", spec)
    if "callable" in spec:
        problems += _callable_problems("run", spec)
    return problems


def validate_check_spec(spec: object) -> list[str]:
    """Problems with a wait step's ``check:`` mapping (empty list when it is fine)."""
    if not isinstance(spec, Mapping):
        return [f"check must be a mapping with 'command', 'http' or 'callable'; got {_show(spec)}"]
    allowed = {"command", "callable", "http", "expect_status", "json_path", "equals", "timeout"}
    problems = _unknown_keys("check", spec, allowed)
    problems += _timeout_problems("check", spec)
    problems += _one_of("check", spec, ("command", "http", "callable"))
    if "command" in spec:
        problems += _command_problems("check", spec)
    if "callable" in spec:
        problems += _callable_problems("check", spec)
    http_only = [k for k in ("expect_status", "json_path", "equals") if k in spec]
    if "http" not in spec:
        if http_only:
            problems.append(f"check: {', '.join(http_only)} only apply to 'http' checks; "
                            "remove them or add 'http: URL'")
        return problems
    url = spec["http"]
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        problems.append(f"check 'http' must be an http:// or https:// URL; got {_show(url)}")
    status = spec.get("expect_status", 200)
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        problems.append(f"check 'expect_status' must be an HTTP status 100-599; "
                        f"got {_show(status)}")
    if "json_path" in spec:
        try:
            parse_json_path(spec["json_path"])
        except ValueError as exc:
            problems.append(f"check 'json_path': {exc}")
    if "equals" in spec and "json_path" not in spec:
        problems.append("check 'equals' needs a 'json_path' that says what to compare")
    return problems


def _openai_problems(spec: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    url = spec.get("base_url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        problems.append(
            f"agent 'base_url' must be an http(s) URL such as 'http://127.0.0.1:8000/v1'; "
            f"got {_show(url)}"
        )
    model = spec.get("model")
    if not isinstance(model, str) or not model.strip():
        problems.append(f"agent 'model' must be a non-empty string; got {_show(model)}")
    if "api_key_env" in spec:
        name = spec["api_key_env"]
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            problems.append(
                "agent 'api_key_env' must name an environment variable (the key itself never "
                f"goes in the file); got a {type(name).__name__}"
            )
    temperature = spec.get("temperature", 0)
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        problems.append(f"agent 'temperature' must be a number; got {_show(temperature)}")
    max_tokens = spec.get("max_tokens", 1)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        problems.append(f"agent 'max_tokens' must be a positive integer; got {_show(max_tokens)}")
    choice = spec.get("tool_choice", "function")
    if choice not in TOOL_CHOICES:
        problems.append(
            f"agent 'tool_choice' must be one of {', '.join(TOOL_CHOICES)}; got {_show(choice)}"
        )
    return problems


def _command_problems(where: str, spec: Mapping[str, Any]) -> list[str]:
    command = spec.get("command")
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            return [f"{where} 'command' cannot be split into arguments ({exc}); use a list"]
        if argv:
            return []
    elif (
        isinstance(command, list)
        and command
        and all(isinstance(p, str | int | float) and not isinstance(p, bool) for p in command)
        and str(command[0]).strip()
    ):
        return []
    return [f"{where} 'command' must be a non-empty list of strings, e.g. [pytest, -q]; "
            f"got {_show(command)}"]


def _callable_problems(where: str, spec: Mapping[str, Any]) -> list[str]:
    ref = spec.get("callable")
    if isinstance(ref, str) and _CALLABLE.fullmatch(ref):  # "$" alone lets "\n" through
        return []
    return [f"{where} 'callable' must look like 'package.module:function'; got {_show(ref)}"]


def _remote_problems(spec: Mapping[str, Any]) -> list[str]:
    """A remote agent's queue and heartbeat (its time limit is the step's ``timeout``)."""
    if "timeout" in spec:
        return ["agent 'timeout' is not for a remote agent; give the step a 'timeout' (it counts from when "
                "the attempt parks)"]
    problems = _unknown_keys("agent", spec, {"type", "queue", "heartbeat"})
    if "queue" not in spec:
        problems.append("a remote agent needs a 'queue' (the name remote agents claim work from)")
    else:
        problem = queue_name_problem(spec["queue"])
        if problem is not None:
            problems.append(problem)
    if "heartbeat" in spec:
        try:
            seconds = parse_duration(spec["heartbeat"])
        except ValueError as exc:
            problems.append(f"agent 'heartbeat': {str(exc).replace('timeout', 'heartbeat')}")
        else:
            if seconds < 1:
                problems.append(f"agent 'heartbeat' must be at least 1s; got {_show(spec['heartbeat'])}")
    return problems


def _timeout_problems(where: str, spec: Mapping[str, Any]) -> list[str]:
    if "timeout" not in spec:
        return []
    try:
        parse_duration(spec["timeout"])
    except ValueError as exc:
        return [f"{where} 'timeout': {exc}"]
    return []


def _one_of(where: str, spec: Mapping[str, Any], keys: tuple[str, ...]) -> list[str]:
    present = [k for k in keys if k in spec]
    if len(present) == 1:
        return []
    wanted = ", ".join(repr(k) for k in keys)
    if not present:
        return [f"{where} needs exactly one of {wanted}; found none"]
    return [f"{where} needs exactly one of {wanted}; found {', '.join(present)}"]


def _unknown_keys(where: str, spec: Mapping[str, Any], allowed: set[str]) -> list[str]:
    unknown = sorted(str(k) for k in spec if k not in allowed)
    if not unknown:
        return []
    return [f"{where} has unknown key(s) {', '.join(unknown)}; "
            f"allowed here: {', '.join(sorted(allowed))}"]


def _show(value: object) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"
