"""A step's declared environment: ``env:`` values and ``secrets:`` names.

    - id: deploy
      kind: code
      env: {REGION: eu-west-1}
      secrets: [DEPLOY_TOKEN]          # taken from the worker's environment when it runs

A step's process gets a minimal environment plus exactly what is declared here (see
``statewright.executors._isolation``). Names full-match ``[A-Z_][A-Z0-9_]*`` and never start
with ``STATEWRIGHT_``: those are the step variables statewright sets itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
RESERVED_PREFIX = "STATEWRIGHT_"
MAX_ENV_VALUE_CHARS = 32_768


def env_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a declared variable's name, or None when it can."""
    if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
        return f"{name!r} is not a variable name (upper-case letters, digits and _, not first a digit)"
    if name.startswith(RESERVED_PREFIX):
        return f"{name!r} is reserved: statewright sets the STATEWRIGHT_* step variables itself"
    return None


def parse_step_env(
    raw: Mapping[str, object],
) -> tuple[dict[str, str], tuple[str, ...], list[str]]:
    """The step's ``env`` and ``secrets`` fields, and the problems with them."""
    problems: list[str] = []
    env: dict[str, str] = {}
    declared = raw.get("env", {})
    if not isinstance(declared, Mapping):
        problems.append(f"'env' must map variable names to text values; got {type(declared).__name__}")
        declared = {}
    for name, value in declared.items():
        problem = env_name_problem(name)
        if problem is not None:
            problems.append(f"env: {problem}")
        elif not isinstance(value, str):
            problems.append(f"env {name}: the value must be text (quote it); got {type(value).__name__}")
        elif len(value) > MAX_ENV_VALUE_CHARS or "\0" in value:
            problems.append(f"env {name}: the value must be text without NUL, at most "
                            f"{MAX_ENV_VALUE_CHARS} characters")
        else:
            env[name] = value
    secrets: list[str] = []
    names = raw.get("secrets", [])
    if not isinstance(names, list):
        problems.append(f"'secrets' must be a list of variable names; got {type(names).__name__}")
        names = []
    for name in names:
        problem = env_name_problem(name)
        if problem is not None:
            problems.append(f"secrets: {problem}")
        elif name in secrets:
            problems.append(f"secrets: {name} is listed twice")
        elif name in env:
            problems.append(f"{name} is both in env and in secrets; a secret's value comes from "
                            "the worker's environment, so remove it from env")
        else:
            secrets.append(name)
    return env, tuple(secrets), problems
