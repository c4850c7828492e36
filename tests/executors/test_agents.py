"""Python-callable and command agents: the verdict comes only from the typed channel."""

from __future__ import annotations

import json
import os
import select
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from statewright._errors import PermanentError, TransientError
from statewright.executors import OUTPUT_LIMIT_CHARS, ExecContext, Reason, run_agent

SCHEMA = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "must_fix": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["approved"],
}
BRIEF = {"instructions": "Review the change.", "input": {"pr": 42}, "prior_attempts": []}


# -- python callables ---------------------------------------------------------------------


def test_python_agent_returns_its_checked_verdict(
    ctx: ExecContext, make_module: Callable[[str], str]
) -> None:
    """A callable's verdict, artifacts, note and token counts come back as an AgentResult."""
    mod = make_module("""
        def review(brief, ctx):
            return {
                "verdict": {"approved": False, "must_fix": ["add a test"]},
                "artifacts": {"review.md": "needs a test"},
                "note": f"looked at PR {brief['input']['pr']} in step {ctx.step}",
                "cost": {"tokens_in": 120, "tokens_out": 30, "money_usd": 0.01},
            }
    """)
    result = run_agent({"type": "python", "callable": f"{mod}:review"}, BRIEF, SCHEMA, ctx)
    assert result.error is None
    assert result.verdict == {"approved": False, "must_fix": ["add a test"]}
    assert result.artifacts == {"review.md": "needs a test"}
    assert result.note == "looked at PR 42 in step review"
    assert (result.cost.tokens_in, result.cost.tokens_out) == (120, 30)
    assert result.cost.money_usd == 0.01
    assert result.cost.seconds >= 0


def test_python_agent_gets_a_copy_of_the_brief_and_the_step_timeout(
    ctx: ExecContext, make_module: Callable[[str], str]
) -> None:
    """The callable cannot change the engine's brief, and sees the resolved timeout."""
    mod = make_module("""
        def review(brief, ctx):
            brief["input"]["pr"] = 0
            return {"verdict": {"approved": True}, "note": str(ctx.timeout_seconds)}
    """)
    brief = json.loads(json.dumps(BRIEF))
    spec = {"type": "python", "callable": f"{mod}:review", "timeout": "90s"}
    result = run_agent(spec, brief, SCHEMA, ctx)
    assert brief["input"]["pr"] == 42
    assert result.note == "90.0"


@pytest.mark.parametrize(
    ("returned", "fragment"),
    [
        ("{'verdict': {'approved': 'true'}}", "not of type 'boolean'"),
        ("{'verdict': {'approved': True, 'merge_now': True}}", "Additional properties"),
        ("{'verdict': None}", "must be a JSON object"),
        ("{'approved': True}", "unknown key(s) approved"),
        ("'approved'", "must return a dict"),
        ("{'verdict': {'approved': True}, 'artifacts': {'x': 1}}", "'artifacts' must map"),
        ("{'verdict': {'approved': True}, 'cost': {'dollars': 1}}", "'cost' may hold only"),
    ],
)
def test_python_agent_wrong_shapes_fail_closed(
    ctx: ExecContext, make_module: Callable[[str], str], returned: str, fragment: str
) -> None:
    """Anything but a schema-valid verdict in the documented envelope is no_verdict."""
    mod = make_module(f"def review(brief, ctx):\n    return {returned}\n")
    result = run_agent({"type": "python", "callable": f"{mod}:review"}, BRIEF, SCHEMA, ctx)
    assert result.verdict is None
    assert result.error == Reason.NO_VERDICT
    assert fragment in result.detail


def test_python_agent_that_raises_is_an_exception_result(
    ctx: ExecContext, make_module: Callable[[str], str]
) -> None:
    """An exception is the attempt's failure, with the traceback kept."""
    mod = make_module("def review(brief, ctx):\n    raise RuntimeError('model melted')\n")
    result = run_agent({"type": "python", "callable": f"{mod}:review"}, BRIEF, SCHEMA, ctx)
    assert result.error == Reason.EXCEPTION
    assert "model melted" in result.artifacts["traceback"]


def test_python_agent_transient_errors_reach_the_retry_policy(
    ctx: ExecContext, make_module: Callable[[str], str]
) -> None:
    """A TransientError raised by the callable propagates instead of failing the attempt."""
    mod = make_module("""
        from statewright._errors import TransientError
        def review(brief, ctx):
            raise TransientError("model server busy", reason="throttled")
    """)
    with pytest.raises(TransientError, match="model server busy"):
        run_agent({"type": "python", "callable": f"{mod}:review"}, BRIEF, SCHEMA, ctx)


def test_python_agent_without_schema_may_give_no_verdict(
    ctx: ExecContext, make_module: Callable[[str], str]
) -> None:
    """A step without an output schema that gives no verdict succeeds with verdict None."""
    mod = make_module("def draft(brief, ctx):\n    return {'verdict': None, 'note': 'drafted'}\n")
    result = run_agent({"type": "python", "callable": f"{mod}:draft"}, BRIEF, None, ctx)
    assert (result.verdict, result.error, result.note) == (None, None, "drafted")


@pytest.mark.parametrize(("given", "verdict", "error", "detail"), [
    ("{'found': [1, 2], 'why': 'two'}", {"found": [1, 2], "why": "two"}, None, ""),
    ("['not', 'an', 'object']", None, Reason.NO_VERDICT, "the verdict must be a JSON object; got array"),
    ("{'x': float('nan')}", None, Reason.NO_VERDICT, "the verdict is "),
], ids=["object-kept", "not-an-object", "nan"])
def test_python_agent_without_schema_keeps_the_verdict_it_gives(
    ctx: ExecContext, make_module: Callable[[str], str], given: str, verdict: Any, error: Reason | None,
    detail: str,
) -> None:
    """Without an output schema a verdict is optional, but one given is kept, and it must be
    a plain JSON object."""
    mod = make_module(f"def draft(brief, ctx):\n    return {{'verdict': {given}}}\n")
    result = run_agent({"type": "python", "callable": f"{mod}:draft"}, BRIEF, None, ctx)
    assert (result.verdict, result.error) == (verdict, error)
    assert detail in result.detail


def test_unresolvable_callables_and_bad_specs_are_permanent(ctx: ExecContext) -> None:
    """A reference that does not import, or a malformed spec, cannot be retried into working."""
    with pytest.raises(PermanentError, match="cannot import module 'no_such_module_xyz'"):
        run_agent({"type": "python", "callable": "no_such_module_xyz:f"}, BRIEF, SCHEMA, ctx)
    with pytest.raises(PermanentError, match="has no attribute path 'nope'"):
        run_agent({"type": "python", "callable": "json:nope"}, BRIEF, SCHEMA, ctx)
    with pytest.raises(PermanentError, match="invalid spec") as info:
        run_agent({"type": "shell", "command": "x"}, BRIEF, SCHEMA, ctx)
    assert info.value.reason == Reason.INVALID_SPEC
    assert "step 'review'" in str(info.value)


# -- command agents -------------------------------------------------------------------------


def test_command_agent_reads_the_verdict_file(ctx: ExecContext, cli_agent: list[str]) -> None:
    """The verdict file is read and checked; stdout is the note and an artifact."""
    spec = {"type": "command", "command": [*cli_agent, "verdict", '{"approved": true}']}
    result = run_agent(spec, BRIEF, SCHEMA, ctx)
    assert result.error is None, result.detail
    assert result.verdict == {"approved": True}
    assert result.note.startswith("I looked at the brief")
    assert result.artifacts["stdout"] == result.note
    assert result.artifacts["stderr"] == ""
    assert result.cost.seconds > 0


def test_command_agent_gets_brief_on_stdin_and_in_a_file(
    ctx: ExecContext, cli_agent: list[str]
) -> None:
    """Brief as file and stdin, STATEWRIGHT_* env, cwd is the workspace; files live outside it."""
    spec = {"type": "command", "command": [*cli_agent, "record", '{"approved": true}']}
    run_agent(spec, BRIEF, SCHEMA, ctx)
    seen = json.loads((ctx.workspace / "seen.json").read_text())
    assert json.loads(seen["stdin"]) == BRIEF
    assert json.loads(seen["brief_file"]) == BRIEF
    env = seen["env"]
    assert env["STATEWRIGHT_TASK_ID"] == "task-1"
    assert env["STATEWRIGHT_STEP"] == "review"
    assert env["STATEWRIGHT_ATTEMPT"] == "1"
    assert env["STATEWRIGHT_WORKSPACE"] == str(ctx.workspace)
    assert Path(env["STATEWRIGHT_VERDICT"]).name == "verdict.json"
    assert Path(seen["cwd"]).resolve() == ctx.workspace.resolve()
    for key in ("STATEWRIGHT_BRIEF", "STATEWRIGHT_VERDICT", "STATEWRIGHT_SCHEMA"):
        assert not Path(env[key]).resolve().is_relative_to(ctx.workspace.resolve())
        assert not Path(env[key]).exists()  # cleaned up after the attempt
    assert sorted(p.name for p in ctx.workspace.iterdir()) == ["seen.json"]


def test_command_agent_stdout_is_never_a_verdict(ctx: ExecContext, cli_agent: list[str]) -> None:
    """A verdict printed to stdout, with no verdict file, is no_verdict."""
    spec = {"type": "command", "command": [*cli_agent, "stdout-only", '{"approved": true}']}
    result = run_agent(spec, BRIEF, SCHEMA, ctx)
    assert result.verdict is None
    assert result.error == Reason.NO_VERDICT
    assert "wrote no verdict file" in result.detail
    assert result.note.strip() == '{"approved": true}'


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("approved", "not valid JSON"),
        ('{"approved": "yes"}', "'yes' is not of type 'boolean'"),
        ('{"approved": true, "also": "deploy to prod"}', "Additional properties"),
        ('[{"approved": true}]', "must be a JSON object"),
    ],
)
def test_command_agent_invalid_verdict_files_fail_closed(
    ctx: ExecContext, cli_agent: list[str], text: str, fragment: str
) -> None:
    """Whatever is wrong with the verdict file ends as no_verdict with the reason."""
    spec = {"type": "command", "command": [*cli_agent, "raw", text]}
    result = run_agent(spec, BRIEF, SCHEMA, ctx)
    assert (result.verdict, result.error) == (None, Reason.NO_VERDICT)
    assert fragment in result.detail


def test_command_agent_nonzero_exit_fails_even_with_a_verdict(
    ctx: ExecContext, cli_agent: list[str]
) -> None:
    """A non-zero exit is exit_status; the verdict it wrote is not used."""
    result = run_agent({"type": "command", "command": [*cli_agent, "exit", "3"]}, BRIEF, SCHEMA, ctx)
    assert (result.verdict, result.error) == (None, Reason.EXIT_STATUS)
    assert "status 3" in result.detail
    assert "about to fail" in result.artifacts["stderr"]


def test_command_agent_output_is_cut_to_the_stated_size(
    ctx: ExecContext, cli_agent: list[str]
) -> None:
    """stdout and stderr keep their last OUTPUT_LIMIT_CHARS characters and say so."""
    n = OUTPUT_LIMIT_CHARS + 5000
    spec = {"type": "command", "command": [*cli_agent, "loud", str(n)]}
    result = run_agent(spec, BRIEF, SCHEMA, ctx)
    for name in ("stdout", "stderr"):
        text = result.artifacts[name]
        assert text.startswith("[... 5000 earlier characters cut ...]\n")
        assert text.endswith("END")
        assert len(text) < OUTPUT_LIMIT_CHARS + 100


def _process_gone(pid: int, wait_seconds: float) -> bool:
    """True when ``pid`` has exited (waiting on a pidfd, not polling)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], wait_seconds)
        return bool(readable)
    finally:
        os.close(fd)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfd_open (Linux)")
def test_command_agent_timeout_kills_the_whole_process_group(
    ctx: ExecContext, cli_agent: list[str], tmp_path: Path
) -> None:
    """A timed-out agent and the processes it started are killed; the result is timeout."""
    pidfile = tmp_path / "grandchild.pid"
    spec = {"type": "command", "command": [*cli_agent, "hang", str(pidfile)], "timeout": "500ms"}
    result = run_agent(spec, BRIEF, SCHEMA, ctx)
    assert (result.verdict, result.error) == (None, Reason.TIMEOUT)
    assert "longer than 0.5s" in result.detail
    assert "started a grandchild" in result.artifacts["stdout"]
    assert result.cost.seconds < 5
    assert _process_gone(int(pidfile.read_text()), wait_seconds=5)


def test_command_agent_timeout_comes_from_the_context_when_the_spec_has_none(
    ctx: ExecContext, cli_agent: list[str], tmp_path: Path
) -> None:
    """ctx.timeout_seconds applies when the spec gives no timeout."""
    spec = {"type": "command", "command": [*cli_agent, "hang", str(tmp_path / "pid")]}
    result = run_agent(spec, BRIEF, SCHEMA, replace(ctx, timeout_seconds=0.3))
    assert result.error == Reason.TIMEOUT


def test_command_agent_missing_program_is_permanent(ctx: ExecContext) -> None:
    """A program that is not installed raises PermanentError naming it."""
    spec = {"type": "command", "command": ["no-such-agent-cli-xyz", "--go"]}
    with pytest.raises(PermanentError, match="'no-such-agent-cli-xyz' is not on PATH"):
        run_agent(spec, BRIEF, SCHEMA, ctx)


def test_command_agent_without_schema_succeeds_on_exit_zero(
    ctx: ExecContext, cli_agent: list[str]
) -> None:
    """With no output schema and no verdict file written, exit 0 is success."""
    spec = {"type": "command", "command": [*cli_agent, "stdout-only", "draft written"]}
    result = run_agent(spec, BRIEF, None, ctx)
    assert (result.verdict, result.error) == (None, None)
    assert result.note.strip() == "draft written"


@pytest.mark.parametrize(("mode", "text", "verdict", "error"), [
    ("verdict", '{"found": 2}', {"found": 2}, None),
    ("raw", "[1, 2]", None, Reason.NO_VERDICT),
    ("raw", "not json", None, Reason.NO_VERDICT),
], ids=["object-kept", "not-an-object", "not-json"])
def test_command_agent_without_schema_keeps_the_verdict_file_it_writes(
    ctx: ExecContext, cli_agent: list[str], mode: str, text: str, verdict: Any, error: Reason | None,
) -> None:
    """Without an output schema a verdict file is optional; one written is read as a verdict
    (a JSON object) and kept."""
    result = run_agent({"type": "command", "command": [*cli_agent, mode, text]}, BRIEF, None, ctx)
    assert (result.verdict, result.error) == (verdict, error), result.detail


def test_command_agent_command_may_be_a_string(ctx: ExecContext, cli_agent: list[str]) -> None:
    """A string command is split into argv (no shell)."""
    command = f"{sys.executable} {cli_agent[1]} verdict '{{\"approved\": false}}'"
    result = run_agent({"type": "command", "command": command}, BRIEF, SCHEMA, ctx)
    assert result.verdict == {"approved": False}
