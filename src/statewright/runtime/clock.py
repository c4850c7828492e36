"""Clocks. The runtime asks a clock; tests inject a FakeClock and never sleep on wall time."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def sleep(self, seconds: float, wake: threading.Event | None = None) -> None: ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def sleep(self, seconds: float, wake: threading.Event | None = None) -> None:
        if wake is not None:
            wake.wait(seconds)
        else:
            time.sleep(seconds)


class FakeClock:
    """Time moves only when a test (or a sleeping worker) advances it."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += int(seconds * 1000)

    def sleep(self, seconds: float, wake: threading.Event | None = None) -> None:
        self.advance(seconds)
