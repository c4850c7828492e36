"""Notification tests run on every store backend, on a fake clock, against real receivers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statewright.runtime.clock import FakeClock

from .receivers import HttpReceiver, SmtpReceiver


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine_defaults(clock: FakeClock, tmp_path: Path) -> Callable[[], dict[str, Any]]:
    return lambda: {"clock": clock, "workspace_root": tmp_path / "workspaces"}


@pytest.fixture
def http() -> Iterator[HttpReceiver]:
    receiver = HttpReceiver()
    yield receiver
    receiver.close()


@pytest.fixture
def smtp() -> Iterator[SmtpReceiver]:
    receiver = SmtpReceiver()
    yield receiver
    receiver.close()
