"""What ai, code and wait steps really run.

The engine's worker calls three functions:

    run_agent(spec, brief, schema, ctx) -> AgentResult     # ai steps
    run_code(spec, ctx) -> CodeResult                      # code steps
    run_check(spec, ctx) -> CheckResult                    # wait steps, loop oracles

Definition loading calls ``validate_agent_spec`` / ``validate_code_spec`` /
``validate_check_spec`` (each returns a list of problems). Coding agents get a
per-attempt workspace from ``prepare_workspace``; ``protected_changes`` and
``restore_protected`` keep the assets checks rely on out of the agent's reach.
``mcp_verdict_command`` is the ``statewright mcp-verdict`` click command.
"""

from typing import TYPE_CHECKING

from statewright._lazy import lazy

if TYPE_CHECKING:
    from ._spec import (
        parse_duration,
        validate_agent_spec,
        validate_check_spec,
        validate_code_spec,
    )
    from ._verdict import VerdictSchema, close_schema
    from .agents import run_agent
    from .base import OUTPUT_LIMIT_CHARS, AgentResult, CheckResult, CodeResult, Cost, ExecContext, Reason
    from .checks import run_check
    from .code import run_code
    from .mcp_verdict import mcp_verdict_command
    from .workspace import (
        prepare_workspace,
        protected_changes,
        remove_workspace,
        resolve_commit,
        restore_protected,
    )

# Each executor is imported when first used: a code step does not load the HTTP client of
# the checks, the OpenAI agent or jsonschema.
_LAZY = {
    "OUTPUT_LIMIT_CHARS": ".base",
    "parse_duration": "._spec",
    "validate_agent_spec": "._spec",
    "validate_check_spec": "._spec",
    "validate_code_spec": "._spec",
    "VerdictSchema": "._verdict",
    "close_schema": "._verdict",
    "run_agent": ".agents",
    "AgentResult": ".base",
    "CheckResult": ".base",
    "CodeResult": ".base",
    "Cost": ".base",
    "ExecContext": ".base",
    "Reason": ".base",
    "run_check": ".checks",
    "run_code": ".code",
    "mcp_verdict_command": ".mcp_verdict",
    "prepare_workspace": ".workspace",
    "protected_changes": ".workspace",
    "remove_workspace": ".workspace",
    "resolve_commit": ".workspace",
    "restore_protected": ".workspace",
}


__getattr__ = lazy(__name__, _LAZY)


__all__ = [
    "OUTPUT_LIMIT_CHARS",
    "AgentResult",
    "CheckResult",
    "CodeResult",
    "Cost",
    "ExecContext",
    "Reason",
    "VerdictSchema",
    "close_schema",
    "mcp_verdict_command",
    "parse_duration",
    "prepare_workspace",
    "protected_changes",
    "remove_workspace",
    "resolve_commit",
    "restore_protected",
    "run_agent",
    "run_check",
    "run_code",
    "validate_agent_spec",
    "validate_check_spec",
    "validate_code_spec",
]
