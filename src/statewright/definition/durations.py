"""Durations in definitions: ``90s``, ``10m``, ``2h``, ``2d``, ``500ms`` or a number of seconds.

Every duration is finite and at most ``MAX_DURATION_SECONDS`` (366 days): a timer, a
timeout or a backoff beyond that is a mistake, and an infinite one cannot be scheduled."""

from __future__ import annotations

import math
import re

from statewright.definition.limits import MAX_DURATION_SECONDS

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_FORMS = "a duration like 90s, 10m, 2h or 2d"


def _bounded(seconds: int | float, value: object) -> float:
    if not (isinstance(seconds, int) or math.isfinite(seconds)) or seconds > MAX_DURATION_SECONDS:
        shown = "a number too large to show" if isinstance(value, int) and seconds > 10**40 else repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        msg = f"expected {_FORMS} of at most 366d, got {shown}"
        raise ValueError(msg)
    return float(seconds)


def parse_duration_seconds(value: object) -> float:
    """Return the duration in seconds, or raise ValueError naming the accepted forms."""
    if isinstance(value, bool):
        raise ValueError(f"expected {_FORMS}, got {value!r}")
    if isinstance(value, int | float) and not (isinstance(value, float) and math.isnan(value)) and value >= 0:
        return _bounded(value, value)
    if isinstance(value, str) and len(value) <= 100:
        text = value.strip().replace(" ", "")
        pos, total = 0, 0.0
        for m in _PART.finditer(text):
            if m.start() != pos:
                break
            total += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if text and pos == len(text):
            return _bounded(total, value)
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    msg = f"expected {_FORMS}, got {shown} ({type(value).__name__})"
    raise ValueError(msg)
