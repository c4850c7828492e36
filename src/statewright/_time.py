"""Times and durations as people read them: local date and time with the zone, never epoch
milliseconds."""

from __future__ import annotations


def when(ms: int | None) -> str:
    """``2026-12-03 10:42 UTC`` (the local zone's name, or its offset)."""
    if ms is None:
        return ""
    from datetime import datetime  # here: the task machine imports this module, few tasks read a time

    moment = datetime.fromtimestamp(ms / 1000).astimezone()
    zone = moment.strftime("%Z") or moment.strftime("%z")
    return moment.strftime("%Y-%m-%d %H:%M ") + zone


def duration(seconds: float) -> str:
    """``45s``, ``4m 58s``, ``2h 5m``, ``3d 4h``: the two largest units that are not zero."""
    total = max(0, round(seconds))
    parts: list[str] = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        count, total = divmod(total, size)
        if count or (unit == "s" and not parts):
            parts.append(f"{count}{unit}")
    return " ".join(parts[:2])
