"""Times and durations as people read them (``statewright._time``): a date and time in the
local zone with the zone's name, and durations in their two largest units."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from statewright._time import duration, when


@pytest.fixture
def zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Set TZ through this; the process's zone is restored after the test."""
    yield monkeypatch
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(("tz", "shown"), [
    ("UTC", "2026-12-01 09:42 UTC"),
    ("Europe/Berlin", "2026-12-01 10:42 CET"),
    ("America/New_York", "2026-12-01 04:42 EST"),
])
def test_a_moment_is_shown_in_the_local_zone_with_its_name(zone: pytest.MonkeyPatch, tz: str, shown: str) -> None:
    """Never epoch milliseconds: the same instant reads differently in each zone, named."""
    zone.setenv("TZ", tz)
    time.tzset()
    assert when(1_796_118_120_000) == shown
    assert when(None) == ""


@pytest.mark.parametrize(("seconds", "shown"), [
    (0, "0s"), (0.4, "0s"), (45, "45s"), (60, "1m"), (298, "4m 58s"), (7_500, "2h 5m"),
    (3 * 86_400 + 4 * 3_600 + 59, "3d 4h"), (-5, "0s"),
])
def test_a_duration_shows_its_two_largest_units(seconds: float, shown: str) -> None:
    """Rounded to the second, the units that are zero left out, never negative."""
    assert duration(seconds) == shown
