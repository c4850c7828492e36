"""``record_dict`` and ``replace``: ``dataclasses.asdict`` and ``dataclasses.replace`` for
the machine's records, without their overhead.

The reducer replaces the state several times per event and the projection is serialised
after every step. ``asdict`` calls ``fields()`` on every record and ``copy.deepcopy`` on
every leaf, so its cost grows with a task's history; ``record_dict`` returns an equal result
(the same keys in the same order, every container copied, nested records converted) but
hands immutable leaves back as they are, which is what ``deepcopy`` does with them too.
``dataclasses.replace`` rebuilds its keyword arguments from ``fields()`` and runs
``__init__``; for a plain frozen record (every field set by ``__init__``, no
``__post_init__``, no ``__slots__``) copying the instance dictionary gives the same object."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import fields
from enum import Enum
from typing import Any, TypeVar

_ATOMS: frozenset[type] = frozenset({str, int, float, bool, type(None)})
_NAMES: dict[type, tuple[str, ...]] = {}
_PLAIN_RECORDS: dict[type, frozenset[str] | None] = {}

R = TypeVar("R")


def replace(obj: R, /, **changes: Any) -> R:
    """``dataclasses.replace(obj, **changes)``: the same new record (and the same errors)."""
    cls = type(obj)
    if cls not in _PLAIN_RECORDS:
        _PLAIN_RECORDS[cls] = _plain_record_fields(cls)
    names = _PLAIN_RECORDS[cls]
    if names is None or not names.issuperset(changes) or obj.__dict__.keys() != names:
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    new = object.__new__(cls)
    attrs = new.__dict__
    attrs.update(obj.__dict__)
    attrs.update(changes)
    return new


def _plain_record_fields(cls: type) -> frozenset[str] | None:
    """The field names when ``replace`` may copy instances of ``cls``; otherwise None."""
    if not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__") or "__slots__" in vars(cls):
        return None
    own = fields(cls)
    if len(own) != len(getattr(cls, "__dataclass_fields__", {})):
        return None  # ClassVar or InitVar pseudo-fields
    if not all(f.init for f in own):
        return None
    return frozenset(f.name for f in own)


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
