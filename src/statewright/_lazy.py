"""Names a package imports on first use (PEP 562): ``__getattr__ = lazy(__name__, TABLE)``,
where TABLE maps each name to the module that defines it (absolute, or relative to the package)."""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING: ``import statewright`` does not import typing
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


def lazy(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)  # the next lookup finds it without us
        return value

    return __getattr__
