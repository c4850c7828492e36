"""Durations in definitions: ``90s``, ``10m``, ``2h``, ``2d``, ``500ms`` or a number of seconds."""

from __future__ import annotations

import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration_seconds(value: object) -> float:
    """Return the duration in seconds, or raise ValueError naming the accepted forms."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 90s, 10m, 2h or 2d, got {value!r}")
    if isinstance(value, int | float) and value >= 0:
        return float(value)
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        pos, total = 0, 0.0
        for m in _PART.finditer(text):
            if m.start() != pos:
                break
            total += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if text and pos == len(text):
            return total
    msg = f"expected a duration like 90s, 10m, 2h or 2d, got {value!r} ({type(value).__name__})"
    raise ValueError(msg)
