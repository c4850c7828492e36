"""code steps: commands (exit status, output, timeout) and Python callables."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import replace

import pytest

from statewright._errors import ExecutorError, PermanentError
from statewright.executors import OUTPUT_LIMIT_CHARS, ExecContext, Reason, run_code


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_exit_zero_is_ok_and_output_is_stdout_then_stderr(ctx: ExecContext) -> None:
    """A command that exits 0 succeeds; output keeps both streams."""
    result = run_code({"command": py("import sys; print('out'); print('err', file=sys.stderr)")},
                      ctx)
    assert result.ok
    assert result.reason is None
    assert result.output == "out\nerr"
    assert result.artifacts == {"stdout": "out\n", "stderr": "err\n"}


def test_nonzero_exit_is_exit_status(ctx: ExecContext) -> None:
    """A failing command is ok=False with reason exit_status and its output."""
    result = run_code({"command": py("import sys; print('2 failed'); sys.exit(1)")}, ctx)
    assert (result.ok, result.reason) == (False, Reason.EXIT_STATUS)
    assert result.output == "2 failed\n[statewright: exit status 1]"


def test_command_runs_in_the_workspace_with_the_base_env(ctx: ExecContext) -> None:
    """cwd is the workspace; STATEWRIGHT_* variables and ctx.env are set; HOME is a private
    directory made for the process (not the worker's home) and removed after it."""
    code = ("import os, json; print(json.dumps([os.getcwd(), os.environ.get('STATEWRIGHT_STEP'),"
            " os.environ.get('EXTRA'), os.environ['HOME'], os.listdir(os.environ['HOME'])]))")
    result = run_code({"command": py(code)}, replace(ctx, env={**ctx.env, "EXTRA": "yes"}))
    cwd, step, extra, home, listing = json.loads(result.output)
    assert (cwd, step, extra, listing) == (str(ctx.workspace), "review", "yes", [])
    assert home != os.path.expanduser("~") and "statewright-step-" in home
    assert not os.path.exists(home)


def test_timeout_kills_and_says_so(ctx: ExecContext) -> None:
    """A command past its timeout is killed; reason timeout."""
    result = run_code({"command": py("import time; print('working', flush=True); "
                                     "time.sleep(30)"), "timeout": "300ms"}, ctx)
    assert (result.ok, result.reason) == (False, Reason.TIMEOUT)
    assert result.output.startswith("working")
    assert "killed after 0.3s" in result.output
    assert result.cost.seconds < 5


def test_output_is_cut(ctx: ExecContext) -> None:
    """Long output keeps its end."""
    n = OUTPUT_LIMIT_CHARS * 2
    result = run_code({"command": py(f"print('x' * {n} + 'TAIL')")}, ctx)
    assert result.output.endswith("TAIL")
    assert len(result.output) < OUTPUT_LIMIT_CHARS + 100


def test_missing_program_and_bad_spec_are_permanent(ctx: ExecContext) -> None:
    """Configuration mistakes are PermanentError, not step failures."""
    with pytest.raises(PermanentError, match="not on PATH"):
        run_code({"command": ["no-such-tool-xyz"]}, ctx)
    with pytest.raises(PermanentError, match="needs exactly one of"):
        run_code({"timeout": "1m"}, ctx)


@pytest.mark.parametrize(
    ("body", "ok", "reason", "output"),
    [
        ("return True", True, None, ""),
        ("return False", False, Reason.FAILED, ""),
        ("return {'ok': True, 'output': 'published'}", True, None, "published"),
        ("return {'ok': False, 'output': 'registry down'}", False, Reason.FAILED, "registry down"),
        ("return 'yes'", False, Reason.BAD_RETURN, "must return a bool or a dict"),
        ("return 1", False, Reason.BAD_RETURN, "returned int"),
        ("return {'ok': 'true'}", False, Reason.BAD_RETURN, "'ok' as a bool"),
        ("return {'ok': True, 'extra': 1}", False, Reason.BAD_RETURN, "unknown key(s) extra"),
        ("raise ValueError('boom')", False, Reason.EXCEPTION, "ValueError: boom"),
    ],
)
def test_python_callables(
    ctx: ExecContext, make_module: Callable[[str], str],
    body: str, ok: bool, reason: Reason | None, output: str,
) -> None:
    """A callable returns a bool or {ok, output?, artifacts?}; anything else fails closed."""
    mod = make_module(f"def step(ctx):\n    {body}\n")
    result = run_code({"callable": f"{mod}:step"}, ctx)
    assert (result.ok, result.reason) == (ok, reason)
    assert output in result.output


@pytest.mark.parametrize("error", ["TransientError", "PermanentError"])
def test_callable_executor_errors_reach_the_retry_policy(
    ctx: ExecContext, make_module: Callable[[str], str], error: str
) -> None:
    """TransientError / PermanentError raised by a callable propagate to the worker."""
    mod = make_module(f"""
        from statewright._errors import {error}
        def step(ctx):
            raise {error}("throttled by the payment API", reason="throttled")
    """)
    with pytest.raises(ExecutorError) as info:
        run_code({"callable": f"{mod}:step"}, ctx)
    assert type(info.value).__name__ == error
    assert info.value.reason == "throttled"


def test_callable_gets_the_context_with_the_step_timeout(
    ctx: ExecContext, make_module: Callable[[str], str]
) -> None:
    """The callable receives the ExecContext, its timeout resolved from the spec."""
    mod = make_module("""
        def step(ctx):
            return {"ok": True, "output": f"{ctx.step} {ctx.timeout_seconds}",
                    "artifacts": {"report": "r"}}
    """)
    result = run_code({"callable": f"{mod}:step", "timeout": "2m"}, ctx)
    assert result.output == "review 120.0"
    assert result.artifacts == {"report": "r"}
