"""``@record`` behaves as ``@dataclass(frozen=True)`` does, for everything the code uses."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import field

import pytest

from statewright._record import record


@record
class Plain:
    """A record with every kind of field."""

    a: int
    b: str = "b"
    c: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    d: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class Twin:
    """The same fields, as a frozen dataclass: what a record must match."""

    a: int
    b: str = "b"
    c: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    d: tuple[int, ...] = ()


@record
class Child(Plain):
    """A record inheriting a record's fields, with a keyword-only one."""

    e: int = 0
    f: str = field(default="f", kw_only=True)


@record
class Checked:
    """A record whose ``__post_init__`` refuses a bad value."""

    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError("n must not be negative")


def test_a_record_prints_compares_and_hashes_as_its_frozen_dataclass_twin() -> None:
    r, t = Plain(1, d=(2,)), Twin(1, d=(2,))
    assert repr(r) == repr(t).replace("Twin", "Plain") == "Plain(a=1, b='b', d=(2,))"
    assert r == Plain(1, "b", {"x": 1}, (2,))  # c is left out of the comparison
    assert r != Plain(2, d=(2,)) and r != t
    assert hash(r) == hash(t) == hash(Plain(1, "b", {"y": 2}, (2,)))
    assert len({r, Plain(1, d=(2,)), Plain(3)}) == 2
    nan = Plain(1, d=(float("nan"),))
    assert nan == nan  # the same object in a field compares equal, as in a tuple


def test_a_record_is_a_dataclass_for_the_standard_library() -> None:
    r = Plain(1)
    assert dataclasses.is_dataclass(r)
    assert [f.name for f in dataclasses.fields(r)] == ["a", "b", "c", "d"]
    assert dataclasses.replace(r, b="z") == Plain(1, "z")
    assert dataclasses.asdict(r) == {"a": 1, "b": "b", "c": {}, "d": ()}
    assert pickle.loads(pickle.dumps(r)) == r
    assert Plain(1).c is not Plain(1).c  # a default factory runs per instance


def test_a_record_cannot_be_changed() -> None:
    r = Plain(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.a = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del r.a  # type: ignore[misc]
    assert r.a == 1


def test_inheritance_keyword_only_fields_and_post_init() -> None:
    c = Child(1, "x", {}, (), 5, f="g")
    assert (c.a, c.b, c.e, c.f) == (1, "x", 5, "g")
    assert repr(c) == "Child(a=1, b='x', d=(), e=5, f='g')"
    with pytest.raises(TypeError):
        Child(1, "x", {}, (), 5, "g")  # type: ignore[misc]
    assert c != Plain(1, "x")
    assert Checked(1).n == 1
    with pytest.raises(ValueError, match="negative"):
        Checked(-1)
    with pytest.raises(TypeError):
        Plain()  # type: ignore[call-arg]


@record
class Shown:
    """A record that prints itself."""

    n: int

    def __repr__(self) -> str:
        return f"<{self.n}>"


def test_a_method_the_class_writes_is_kept() -> None:
    assert repr(Shown(3)) == "<3>"
    assert Shown(3) == Shown(3) and hash(Shown(3)) == hash(Shown(3))


def test_the_init_is_compiled_when_the_first_record_is_made() -> None:
    """Until one is made a record's ``__init__`` is the one that compiles it; the first call
    puts the compiled one in its place, for the record and for a plain subclass alike, and
    a bad call is refused as the compiled one refuses it."""

    @record
    class Later:
        a: int
        b: str = "b"

    class Plainly(Later):
        pass

    first = vars(Later)["__init__"]
    with pytest.raises(TypeError):
        Later()  # type: ignore[call-arg]
    assert vars(Later)["__init__"] is not first  # compiled, even by a call it refused
    compiled = vars(Later)["__init__"]
    assert (Later(1).a, Later(2, b="c").b, Plainly(3).a) == (1, "c", 3)
    assert vars(Later)["__init__"] is compiled and "__init__" not in vars(Plainly)
    assert Later.__init__.__qualname__.endswith("Later.__init__")


class Slotted:
    """A base with slots: a record made from it sets its fields one by one."""

    __slots__ = ("__dict__", "extra")


def test_a_record_over_a_slotted_base_sets_its_fields() -> None:
    @record
    class Over(Slotted):
        a: int
        b: dict[str, int] = field(default_factory=dict)

    o = Over(1)
    assert (o.a, o.b, list(vars(o))) == (1, {}, ["a", "b"])
    assert Over(2, {"x": 1}) == Over(2, {"x": 1}) and Over(1).b is not o.b
