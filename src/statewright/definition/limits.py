"""The bounds every workflow and loop file is held to, and the rules for names.

A definition that breaks one is refused at load time with a line naming the file, the
place and the bound, before anything is stored or run. The JSON bounds shared with task
input live in ``statewright._json_limits`` and are repeated here so one module lists them.
"""

from __future__ import annotations

import re
from typing import TypeGuard

from statewright._json_limits import (
    MAX_INPUT_BYTES,
    MAX_JSON_DEPTH,
    MAX_JSON_INT,
    JsonLimits,
)

MAX_DEFINITION_BYTES = 524_288
"""Bytes of one workflow or loop file."""
MAX_YAML_NODES = 100_000
"""YAML nodes composed from one file, each alias counted again as the nodes it repeats,
so an alias bomb is refused after this many, in well under a second."""
MAX_YAML_EXPANDED_CHARS = 4 * MAX_DEFINITION_BYTES
"""Scalar characters of one file after alias expansion (a 1 kB string aliased a
million times is a gigabyte to hash)."""
MAX_DEFINITION_DEPTH = MAX_JSON_DEPTH
"""Mappings and lists nested inside one another, the top mapping counted."""
MAX_DEFINITION_STRING_CHARS = 100_000
"""Characters in one string of a definition (instructions included)."""
MAX_SCHEMA_REF_CHAIN = 32
"""``$ref``/``allOf``/``not``... applied in place, one inside the next, in a JSON Schema."""
MAX_STEPS = 200
"""Steps in one workflow."""
MAX_DURATION_SECONDS = 366 * 86_400
"""Longest duration anywhere (timeouts, intervals, backoffs, expiry): 366 days."""
MAX_VERSION = 2**31 - 1
"""Largest workflow ``version``."""
MAX_ATTEMPTS = 1_000
"""Largest ``max_attempts`` (loop-backs and command retries) and loop attempt counts."""
MAX_CHECKS = 100_000
"""Largest ``max_checks`` of a wait step."""
MAX_DELIVERIES_BOUND = 100
"""Largest ``retry.max_deliveries`` (and ``statewright worker --max-deliveries``)."""
MIN_RETRY_MULTIPLIER = 1.0
MAX_RETRY_MULTIPLIER = 10.0
"""Range of ``retry.multiplier``."""
MAX_COUNT = 2**53 - 1
"""Largest budget figure (loop passes, tokens): exact in every JSON reader."""
MAX_MONEY_USD = 1_000_000_000.0
"""Largest money budget of a loop."""

DEFINITION_JSON_LIMITS = JsonLimits(
    max_depth=MAX_DEFINITION_DEPTH,
    max_nodes=MAX_YAML_NODES,
    max_string_chars=MAX_DEFINITION_STRING_CHARS,
    max_int_abs=MAX_JSON_INT,
    allow_nul=False,
)

# Names are matched whole (re.fullmatch): '$' would also match before a trailing newline.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""Workflow names, step ids, roles and outcome names."""
OWNER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
"""Step owners: a team or a person (``team-triage``, ``alice@example.com``)."""
NAME_RULE = "1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
OWNER_RULE = "1-64 letters, digits, '_', '.', '@' or '-', starting with a letter or digit"


def is_name(value: object, pattern: re.Pattern[str] = NAME) -> TypeGuard[str]:
    """Whether ``value`` is a string the pattern matches whole."""
    return isinstance(value, str) and pattern.fullmatch(value) is not None


__all__ = [
    "DEFINITION_JSON_LIMITS",
    "MAX_ATTEMPTS",
    "MAX_CHECKS",
    "MAX_COUNT",
    "MAX_DEFINITION_BYTES",
    "MAX_DEFINITION_DEPTH",
    "MAX_DEFINITION_STRING_CHARS",
    "MAX_DELIVERIES_BOUND",
    "MAX_DURATION_SECONDS",
    "MAX_INPUT_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_JSON_INT",
    "MAX_MONEY_USD",
    "MAX_RETRY_MULTIPLIER",
    "MAX_SCHEMA_REF_CHAIN",
    "MAX_STEPS",
    "MAX_VERSION",
    "MAX_YAML_EXPANDED_CHARS",
    "MAX_YAML_NODES",
    "MIN_RETRY_MULTIPLIER",
    "NAME",
    "NAME_RULE",
    "OWNER",
    "OWNER_RULE",
    "is_name",
]
