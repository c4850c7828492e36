"""What a step may hand back as data: plain JSON that every backend stores and hashes alike.

Step output is hostile until checked. ``plain_json`` walks a value without recursion (a
verdict nested 100,000 deep costs a loop, not the stack) and returns a copy made of exact
builtin types, or says why there is none:

- only objects with string keys, arrays, strings, integers, finite floats, booleans, null;
- no more than ``MAX_JSON_DEPTH`` levels of nesting (a cycle is endless nesting);
- integers within 64 bits, no NaN or Infinity (they are not JSON);
- strings of Unicode scalar values (a lone surrogate such as ``"\\ud800"`` cannot be
  written as UTF-8, so it could be neither stored nor hashed);
- at most ``max_bytes`` bytes once written as JSON.

``clean_text`` makes free text (notes, output, error details) storable instead: a lone
surrogate is written as its escape (``\\ud800``), which people can still read.

Problem messages read after "the verdict is" ("nested deeper than 64 levels (at /a/b)").
Depth and integer bounds are the ones task input is held to (``_json_limits``): what a step
hands back may be as deep and as large in its integers as what a task is given, no more.
"""

from __future__ import annotations

import json
import math
from typing import Any

from statewright._json_limits import MAX_JSON_DEPTH, MAX_JSON_INT
from statewright._record import record

__all__ = ["MAX_JSON_BYTES", "MAX_JSON_DEPTH", "MAX_JSON_INT", "JsonProblem", "clean_text", "loads_plain", "plain_json"]

MAX_JSON_BYTES = 1_000_000  # a verdict's size written as JSON (UTF-8 bytes)


@record
class JsonProblem:
    """Why a value is not plain JSON. ``too_large`` tells a size problem from a malformed one."""

    message: str
    too_large: bool = False


def plain_json(
    value: object, *, max_depth: int = MAX_JSON_DEPTH, max_bytes: int = MAX_JSON_BYTES
) -> tuple[Any, JsonProblem | None]:
    """``(copy, None)`` when ``value`` is plain JSON within the limits, else ``(None, problem)``.
    The copy holds exact builtin types only (no subclass of dict, str or float survives)."""
    size = 0
    root: list[Any] = [None]
    # Each entry: a value to copy, the container and slot its copy goes to, depth, path.
    stack: list[tuple[object, Any, Any, int, str]] = [(value, root, 0, 1, "")]
    while stack:
        node, into, slot, depth, path = stack.pop()
        size += 1
        if size > max_bytes:
            return None, _too_large(max_bytes)
        if isinstance(node, dict):
            if depth > max_depth:
                return None, _bad(path, f"nested deeper than {max_depth} levels")
            copy: dict[str, Any] = {}
            for key, item in node.items():
                if not isinstance(key, str):
                    return None, _bad(path, f"not plain JSON: key {key!r} is not a string")
                name = str.__str__(key)
                problem = _text_problem(name, f"{path}/{name[:40]}")
                if problem is not None:
                    return None, problem
                size += len(name) + 4
                if size > max_bytes:
                    return None, _too_large(max_bytes)
                copy[name] = None
                stack.append((item, copy, name, depth + 1, f"{path}/{name[:40]}"))
            into[slot] = copy
        elif isinstance(node, list):
            if depth > max_depth:
                return None, _bad(path, f"nested deeper than {max_depth} levels")
            size += len(node)
            if size > max_bytes:
                return None, _too_large(max_bytes)
            items: list[Any] = [None] * len(node)
            stack.extend((item, items, i, depth + 1, f"{path}/{i}") for i, item in enumerate(node))
            into[slot] = items
        elif isinstance(node, str):
            text = str.__str__(node)
            size += len(text) + 2
            if size > max_bytes:
                return None, _too_large(max_bytes)
            problem = _text_problem(text, path)
            if problem is not None:
                return None, problem
            into[slot] = text
        elif node is None or isinstance(node, bool):
            into[slot] = None if node is None else bool(node)
        elif isinstance(node, int):
            if abs(node) > MAX_JSON_INT:
                return None, _bad(path, "not plain JSON: the integer is beyond 64 bits")
            into[slot] = int(node)
        elif isinstance(node, float):
            if not math.isfinite(node):
                return None, _bad(path, f"not plain JSON: {node!r} is not a JSON number")
            into[slot] = float(node)
        else:
            kind = type(node).__name__
            return None, _bad(path, f"not plain JSON: a {kind} is not JSON data")
    # ``size`` counts characters; written as JSON one may take up to 6 bytes (an escape).
    if size * 6 > max_bytes and len(json.dumps(root[0], ensure_ascii=False).encode("utf-8")) > max_bytes:
        return None, _too_large(max_bytes)
    return root[0], None


def loads_plain(
    text: str, *, max_depth: int = MAX_JSON_DEPTH, max_bytes: int = MAX_JSON_BYTES
) -> tuple[Any, JsonProblem | None]:
    """Parse JSON text strictly (``NaN``/``Infinity`` are refused, as JSON says) and check it
    as ``plain_json`` does."""
    if len(text) > max_bytes:
        return None, _too_large(max_bytes)
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        return None, JsonProblem(f"not valid JSON ({exc.msg} at line {exc.lineno})")
    except _NotJson as exc:
        return None, JsonProblem(f"not plain JSON: {exc} is not a JSON number")
    except RecursionError:
        return None, JsonProblem(f"nested deeper than {max_depth} levels")
    except ValueError:  # an integer with more digits than Python converts
        return None, JsonProblem("not plain JSON: an integer has more digits than JSON readers keep")
    return plain_json(value, max_depth=max_depth, max_bytes=max_bytes)


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate written as its escape, so it can be stored."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


class _NotJson(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NotJson(name)


def _text_problem(text: str, path: str) -> JsonProblem | None:
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        return _bad(path, f"not plain JSON: a lone surrogate (U+{code:04X}) is not Unicode text")
    return None


def _bad(path: str, what: str) -> JsonProblem:
    return JsonProblem(f"{what} (at {_where(path)})")


def _where(path: str) -> str:
    if not path:
        return "(top level)"
    return path if len(path) <= 60 else path[:40] + "/.../" + path.rsplit("/", 1)[-1][:20]


def _too_large(max_bytes: int) -> JsonProblem:
    return JsonProblem(f"larger than {max_bytes} bytes written as JSON", too_large=True)
