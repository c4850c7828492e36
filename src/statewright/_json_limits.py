"""Bounds on JSON-shaped data: what statewright accepts from a file, a flag or a step.

Entry points, stdlib only, so any layer may use them:

    check_json_value(value, limits) -> problem | None    # data already in memory
    iter_json_problems(value, limits) -> every problem   # for a report of them all
    loads_json(data, what) -> value                      # text or bytes from outside
    loads_json_object(data, what) -> dict                # the same, and an object
    read_regular_file(path, what) -> bytes               # a file's bytes, never blocking

A value passes when it is plain JSON (dict with str keys, list, str, int, float, bool,
None), nested at most ``max_depth`` deep, at most ``max_nodes`` values in all, its
strings at most ``max_string_chars`` long and valid Unicode (no lone surrogates, which
cannot be encoded as UTF-8 and so cannot be hashed or stored), its integers within
``max_int_abs`` and its floats finite (NaN and Infinity are not JSON). The walk is
iterative: a value nested a million deep, or one that contains itself, gets a problem
line, never a RecursionError.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from typing import Any

from statewright._errors import InputError
from statewright._record import record

MAX_JSON_DEPTH = 64
"""Containers (objects and arrays) nested inside one another, the outermost counted."""
MAX_JSON_NODES = 1_000_000
"""Values in one document, every container and scalar counted."""
MAX_STRING_CHARS = 1_048_576
"""Characters in one string (a key or a value)."""
MAX_JSON_INT = 2**63 - 1
"""Largest integer magnitude: a signed 64-bit integer, what every store column and
every JSON reader in another language can hold. Bigger numbers belong in strings."""
MAX_INPUT_BYTES = 1_048_576
"""Bytes of a task's ``--input`` (inline or ``@file.json``)."""

_INT_DIGITS = len(str(MAX_JSON_INT))
_SURROGATE = re.compile("[\ud800-\udfff]")


@record
class JsonLimits:
    """The bounds a JSON value is checked against: nesting depth, node count, string length, integer
    size."""

    max_depth: int = MAX_JSON_DEPTH
    max_nodes: int = MAX_JSON_NODES
    max_string_chars: int = MAX_STRING_CHARS
    max_int_abs: int = MAX_JSON_INT
    allow_nul: bool = True  # definitions refuse U+0000: argv, names and paths cannot hold it


DEFAULT_LIMITS = JsonLimits()


def json_path(parts: tuple[str | int, ...]) -> str:
    """``("steps", 0, "run")`` -> ``steps[0].run`` (``$`` for the top)."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "$"


def _string_problem(text: str, limits: JsonLimits) -> str | None:
    if len(text) > limits.max_string_chars:
        return f"a string of {len(text):,} characters; the most is {limits.max_string_chars:,}"
    m = _SURROGATE.search(text)
    if m is not None:
        return (f"a lone surrogate \\u{ord(m.group()):04x} at character {m.start()}, "
                "which is not valid Unicode")
    if not limits.allow_nul and "\x00" in text:
        return "a NUL character (\\u0000), which names, paths and commands cannot hold"
    return None


def _scalar_problem(value: object, limits: JsonLimits) -> str | None:
    if isinstance(value, str):
        return _string_problem(value, limits)
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        if abs(value) > limits.max_int_abs:
            if value.bit_length() <= 10_000:  # str() refuses past 4300 digits
                digits = f"{len(str(abs(value))):,}"
            else:
                digits = f"about {int(value.bit_length() * math.log10(2)) + 1:,}"
            return (f"an integer of {digits} digits; integers must lie within "
                    f"+-{limits.max_int_abs} (use a string for bigger numbers)")
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value!r} is not a finite number (JSON has no NaN or Infinity)"
    return f"a {type(value).__name__}, which is not a JSON value"


def check_json_value(value: object, limits: JsonLimits = DEFAULT_LIMITS) -> str | None:
    """The first way ``value`` breaks ``limits``, as ``"at PATH: what"``, or None."""
    return next(iter_json_problems(value, limits), None)


def iter_json_problems(value: object, limits: JsonLimits = DEFAULT_LIMITS) -> Iterator[str]:
    """Every way ``value`` breaks ``limits``, in document order. A container nested too
    deep is reported and not entered; past ``max_nodes`` the walk stops."""
    stack: list[tuple[object, tuple[str | int, ...]]] = [(value, ())]
    nodes = 0
    while stack:
        item, path = stack.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            yield f"more than {limits.max_nodes:,} values in all; the most is {limits.max_nodes:,}"
            return
        if isinstance(item, dict | list | tuple):
            if len(path) >= limits.max_depth:
                yield (f"at {json_path(path)}: nested deeper than {limits.max_depth} levels "
                       "(or an object that contains itself)")
                continue
            children: list[tuple[object, tuple[str | int, ...]]] = []
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        yield f"at {json_path(path)}: a key of type {type(key).__name__}; keys must be strings"
                        continue
                    problem = _string_problem(key, limits)
                    if problem is not None:
                        yield f"at {json_path(path)}: a key holds {problem}"
                        continue
                    children.append((child, (*path, key)))
            else:
                children = [(child, (*path, i)) for i, child in enumerate(item)]
            stack.extend(reversed(children))
            continue
        problem = _scalar_problem(item, limits)
        if problem is not None:
            yield f"at {json_path(path)}: {problem}"


class _Refused(Exception):
    """Raised by a json hook to stop parsing at the first bad number."""


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > _INT_DIGITS:  # refused before int() sees it: no 4300-digit ValueError
        raise _Refused(f"an integer of {digits:,} digits; integers must lie within +-{MAX_JSON_INT} "
                       "(use a string for bigger numbers)")
    value = int(text)
    if abs(value) > MAX_JSON_INT:
        raise _Refused(f"the integer {text} is out of range; integers must lie within +-{MAX_JSON_INT}")
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise _Refused(f"the number {shown}, too large for a float")
    return value


def _parse_constant(text: str) -> float:
    raise _Refused(f"{text}, which is not JSON (JSON has no NaN or Infinity)")


def loads_json(data: str | bytes, what: str, limits: JsonLimits = DEFAULT_LIMITS,
               max_bytes: int = MAX_INPUT_BYTES) -> Any:
    """Parse JSON from outside (a flag, a file, a program's output) within ``limits``, or
    raise InputError with one line that starts with ``what`` and says what is wrong."""
    size = len(data) if isinstance(data, bytes) else len(data.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise InputError(f"{what} is {size:,} bytes; the most is {max_bytes:,}")
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{what} is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset "
                             f"{exc.start}; save it as UTF-8") from None
    else:
        m = _SURROGATE.search(data)
        if m is not None:  # what the OS could not decode arrives as lone surrogates
            raise InputError(f"{what} is not valid UTF-8 text (character {m.start()}); pass UTF-8") from None
        text = data
    try:
        value = json.loads(text, parse_int=_parse_int, parse_float=_parse_float,
                           parse_constant=_parse_constant)
    except _Refused as exc:
        raise InputError(f"{what} holds {exc}") from None
    except RecursionError:
        raise InputError(f"{what} is nested deeper than {limits.max_depth} levels") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    problem = check_json_value(value, limits)
    if problem is not None:
        raise InputError(f"{what}: {problem}")
    return value


def loads_json_object(data: str | bytes, what: str, limits: JsonLimits = DEFAULT_LIMITS,
                      max_bytes: int = MAX_INPUT_BYTES) -> dict[str, Any]:
    """``loads_json`` for a value that must be a JSON object (a task's input)."""
    value = loads_json(data, what, limits, max_bytes)
    if not isinstance(value, dict):
        raise InputError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
)


def read_regular_file(path: str | os.PathLike[str], what: str, max_bytes: int = MAX_INPUT_BYTES, *,
                      follow_links: bool = True) -> bytes:
    """The bytes of a regular file, at most ``max_bytes + 1`` of them (so a caller sees it
    is too big), or InputError with one line starting with ``what``. Opened without
    blocking (a FIFO would block ``open``) and checked on the open descriptor: a FIFO, a
    directory, a device (``/dev/zero``) or a link to one is refused unread. With
    ``follow_links=False`` a symbolic link itself is refused."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP and not follow_links else exc.strerror
        raise InputError(f"{what}: cannot read the file ({why})") from None
    except ValueError as exc:  # a NUL in the path
        raise InputError(f"{what}: cannot read the file ({exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")
            raise InputError(f"{what}: the path names {kind}; give a regular file")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(f"{what}: cannot read the file ({exc.strerror})") from None
    finally:
        os.close(fd)
