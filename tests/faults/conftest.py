"""Fault tests run real worker processes against PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.backends import skip_unreachable_postgres


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_unreachable_postgres(items, Path(__file__).parent)
