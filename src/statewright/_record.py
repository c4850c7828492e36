"""``@record``: a frozen dataclass that is cheap to define.

``@dataclass(frozen=True)`` compiles six methods from generated source for every class
(``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``),
about 0.7 ms a class on Python 3.11; the records of the engine made that most of what a
new process spent before its first task. A record compiles only its ``__init__``, and
only when the first one is made; the other five are shared functions that read the class's
fields. What a record is to the rest of the code does not change: ``dataclasses.fields``,
``replace``, ``asdict`` and ``is_dataclass`` see a dataclass, instances are immutable
(``FrozenInstanceError``), compare and hash by their fields (``field(compare=False)`` left
out) and print as a dataclass does (``field(repr=False)`` left out)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import MISSING, Field, FrozenInstanceError, field
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")

_FACTORY = object()  # the default of a parameter whose field has a default factory


@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
def record(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen dataclass (see the module)."""
    dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    compared = [f.name for f in fields if f.compare]
    hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
    methods = {
        "__init__": _first_init(cls, fields),
        "__setattr__": _frozen_setattr,
        "__delattr__": _frozen_delattr,
        "__repr__": _repr,
        "__eq__": _eq,
        "__hash__": _hash,
        "_record_repr": tuple(f.name for f in fields if f.repr),
        "_record_key": staticmethod(_key(compared)),
        "_record_hash_key": staticmethod(_key(hashed)),
    }
    own = vars(cls)
    for name, value in methods.items():
        if own.get(name) is None:  # a method the class writes itself is kept, as a dataclass keeps it
            setattr(cls, name, value)
    return cls


def _key(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple of ``names``' values of a record, as a dataclass compares and hashes it."""
    if not names:
        return lambda _: ()
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return attrgetter(*names)


def _first_init(cls: type, fields: tuple[Field[Any], ...]) -> Any:
    """The ``__init__`` a record starts with: on its first call it compiles the record's own
    (``_init``), puts it in its place and calls it. Most records a process defines are never
    made (the first task of a process makes 23 of the 76 it imports), and compiling one costs
    about 150 us on Python 3.11."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init = _init(cls, fields)
        if vars(cls).get("__init__") is first:
            cls.__init__ = init  # type: ignore[misc]
        init(self, *args, **kwargs)

    first = __init__
    first.__qualname__ = f"{cls.__qualname__}.__init__"
    first.__module__ = cls.__module__
    return first


def _init(cls: type, fields: tuple[Field[Any], ...]) -> Any:
    """The one compiled method: ``__init__(self, a, b=<default>, ...)`` putting every field in
    the instance's dictionary at once, in declaration order (through ``object.__setattr__``
    one by one when a class of the record has ``__slots__``), then calling
    ``__post_init__`` when the class has one."""
    names: dict[str, Any] = {"_set": object.__setattr__, "_FACTORY": _FACTORY}
    positional: list[str] = ["self"]
    keyword: list[str] = []
    values: list[tuple[str, str]] = []
    for f in fields:
        if f.default is not MISSING:
            names[f"_d_{f.name}"] = f.default
            param, value = f"{f.name}=_d_{f.name}", f.name
        elif f.default_factory is not MISSING:
            names[f"_f_{f.name}"] = f.default_factory
            param, value = f"{f.name}=_FACTORY", f"_f_{f.name}() if {f.name} is _FACTORY else {f.name}"
        else:
            param, value = f.name, f.name
        (keyword if f.kw_only else positional).append(param)
        values.append((f.name, value))
    if any("__slots__" in vars(c) for c in cls.__mro__[:-1]):
        body = [f" _set(self, {name!r}, {value})" for name, value in values]
    else:
        body = [" self.__dict__.update({" + ", ".join(f"{name!r}: {value}" for name, value in values) + "})"]
    if hasattr(cls, "__post_init__"):
        body.append(" self.__post_init__()")
    params = positional + (["*", *keyword] if keyword else [])
    source = f"def __init__({', '.join(params)}):\n" + ("\n".join(body) or " pass") + "\n"
    exec(source, names)
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    return init


def _frozen_setattr(self: object, name: str, value: object) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: object, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _repr(self: Any) -> str:
    inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._record_repr)
    return f"{type(self).__qualname__}({inner})"


def _eq(self: Any, other: Any) -> object:
    if other.__class__ is not self.__class__:
        return NotImplemented
    key = self._record_key
    return bool(key(self) == key(other))


def _hash(self: Any) -> int:
    return hash(self._record_hash_key(self))


__all__ = ["record"]
