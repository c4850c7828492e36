"""The public surface of statewright.executors is pinned."""

from __future__ import annotations

import inspect

import statewright.executors as executors


def test_all_is_sorted_and_complete() -> None:
    """__all__ lists exactly the public names, sorted, and each one exists."""
    assert executors.__all__ == sorted(executors.__all__, key=lambda n: (not n.isupper(), n))
    assert executors.__all__ == [
        "OUTPUT_LIMIT_CHARS", "AgentResult", "CheckResult", "CodeResult", "Cost",
        "ExecContext", "Reason", "VerdictSchema", "close_schema", "mcp_verdict_command",
        "parse_duration", "prepare_workspace", "protected_changes", "remove_workspace",
        "resolve_commit", "restore_protected", "run_agent", "run_check", "run_code",
        "validate_agent_spec", "validate_check_spec", "validate_code_spec",
    ]
    for name in executors.__all__:
        assert hasattr(executors, name), name


def test_the_engine_facing_signatures() -> None:
    """The worker calls these exact signatures."""
    assert list(inspect.signature(executors.run_agent).parameters) == [
        "spec", "brief", "schema", "ctx"]
    assert list(inspect.signature(executors.run_code).parameters) == ["spec", "ctx"]
    assert list(inspect.signature(executors.run_check).parameters) == ["spec", "ctx"]
    assert list(inspect.signature(executors.prepare_workspace).parameters) == [
        "repo", "base_ref", "dest"]
    assert list(inspect.signature(executors.protected_changes).parameters) == [
        "workspace", "base_ref", "protected"]
    assert list(inspect.signature(executors.restore_protected).parameters) == [
        "workspace", "base_ref", "protected"]
    assert executors.mcp_verdict_command.name == "mcp-verdict"


def test_openai_module_does_not_import_httpx_at_load() -> None:
    """httpx is the [llm] extra: importing the executors must not need it."""
    import subprocess
    import sys

    code = ("import sys; import statewright.executors, statewright.executors.openai_agent; "
            "print('httpx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
