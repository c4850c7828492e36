"""The remote-agent engine tests run on every store backend, on a fake clock."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statewright.runtime.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine_defaults(clock: FakeClock, tmp_path: Path) -> Callable[[], dict[str, Any]]:
    return lambda: {"clock": clock, "workspace_root": tmp_path / "ws"}
