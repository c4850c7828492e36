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
MAX_MAP_CONCURRENCY = 1_000
"""A map step's ``max_concurrency``: children running at once."""
MAX_MAP_DEPTH = 8
"""Workflows that map workflows that map ...: the deepest chain of map steps."""
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
DEFAULT_RESULT_LIMIT_BYTES = 256 * 1024
"""A step's result (verdict, output object, last check) written as JSON, unless the step
says otherwise (``result_limit``)."""
MAX_RESULT_LIMIT_BYTES = 1_000_000
"""Largest ``result_limit``: a result lives in an event, and no event holds more."""

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


_SIZE = re.compile(r"\s*([0-9]{1,12})\s*(B|KB|KiB|MB|MiB)?\s*")
_SIZE_UNITS = {None: 1, "B": 1, "KB": 1000, "KiB": 1024, "MB": 1000**2, "MiB": 1024**2}


def parse_size_bytes(value: object) -> int:
    """Bytes in a size: a whole number of bytes, or text such as ``64KiB``, ``500KB``,
    ``1MB`` (KiB/MiB count 1024s, KB/MB 1000s). ValueError says the accepted forms."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str) and (m := _SIZE.fullmatch(value)) is not None:
        size = int(m.group(1)) * _SIZE_UNITS[m.group(2)]
    else:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ValueError(f"a size must be a whole number of bytes or text like 64KiB, 500KB or 1MB; got {shown}")
    if not 1 <= size <= MAX_RESULT_LIMIT_BYTES:
        raise ValueError(f"a size must be from 1 byte to {MAX_RESULT_LIMIT_BYTES:,} bytes; got {value!r}")
    return size


def is_name(value: object, pattern: re.Pattern[str] = NAME) -> TypeGuard[str]:
    """Whether ``value`` is a string the pattern matches whole."""
    return isinstance(value, str) and pattern.fullmatch(value) is not None


__all__ = [
    "DEFAULT_RESULT_LIMIT_BYTES",
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
    "MAX_MAP_CONCURRENCY",
    "MAX_MAP_DEPTH",
    "MAX_MONEY_USD",
    "MAX_RESULT_LIMIT_BYTES",
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
    "parse_size_bytes",
]
