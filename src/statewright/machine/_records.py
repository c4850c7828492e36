"""``record_dict``: ``dataclasses.asdict`` for the machine's records, without its overhead.

The projection is serialised after every step, and ``asdict`` calls ``fields()`` on every
record and ``copy.deepcopy`` on every leaf, so its cost grows with a task's history.
``record_dict`` returns an equal result (the same keys in the same order, every container
copied, nested records converted) but hands immutable leaves back as they are, which is
what ``deepcopy`` does with them too."""

from __future__ import annotations

import copy
from dataclasses import fields
from enum import Enum
from typing import Any

_ATOMS: frozenset[type] = frozenset({str, int, float, bool, type(None)})
_NAMES: dict[type, tuple[str, ...]] = {}


def record_dict(obj: Any) -> dict[str, Any]:
    """``dataclasses.asdict(obj)``; raises TypeError when ``obj`` is not a dataclass instance."""
    cls = type(obj)
    names = _NAMES.get(cls)
    if names is None:
        names = tuple(f.name for f in fields(obj))  # TypeError for a non-dataclass, as asdict
        _NAMES[cls] = names
    return {name: _plain(getattr(obj, name)) for name in names}


def _plain(value: Any) -> Any:
    """What ``dataclasses._asdict_inner`` returns for ``value`` (with ``dict_factory=dict``)."""
    cls = type(value)
    if cls in _ATOMS:
        return value
    if cls is dict:
        return {_plain(k): _plain(v) for k, v in value.items()}
    if cls is list:
        return [_plain(v) for v in value]
    if cls is tuple:
        return tuple(_plain(v) for v in value)
    if hasattr(cls, "__dataclass_fields__"):
        return record_dict(value)
    if isinstance(value, Enum) and not isinstance(value, list | tuple | dict):
        return value  # deepcopy of an enum member is the member
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return cls(*[_plain(v) for v in value])
    if isinstance(value, list | tuple):
        return cls(_plain(v) for v in value)
    if isinstance(value, dict):
        return cls((_plain(k), _plain(v)) for k, v in value.items())
    return copy.deepcopy(value)
