"""A tiny JSONPath subset for HTTP checks: ``$``, ``.name``, ``['name']``, ``[0]``, ``[-1]``.

No filters, wildcards or recursive descent: a check names one value.
"""

from __future__ import annotations

import re
from typing import Any

_TOKEN = re.compile(
    r"""\.(?P<name>[A-Za-z_][\w-]*)        # .name
      | \[(?P<index>-?\d+)\]                # [0], [-1]
      | \[\s*'(?P<sq>(?:[^'\\]|\\.)*)'\s*\]  # ['name']
      | \[\s*"(?P<dq>(?:[^"\\]|\\.)*)"\s*\]  # ["name"]
    """,
    re.VERBOSE,
)

Step = str | int


def parse_json_path(path: object) -> tuple[Step, ...]:
    """The steps of ``$.a.b[0]`` as ``('a', 'b', 0)``; ValueError says where parsing stopped."""
    if not isinstance(path, str) or not path.startswith("$"):
        msg = f"must start with '$', like '$.status' or '$.items[0].state'; got {path!r}"
        raise ValueError(msg)
    steps: list[Step] = []
    pos = 1
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if m is None:
            msg = (
                f"cannot read {path!r} at position {pos} ({path[pos:]!r}); the supported "
                "forms are .name, ['name'] and [index]"
            )
            raise ValueError(msg)
        if m.group("name") is not None:
            steps.append(m.group("name"))
        elif m.group("index") is not None:
            steps.append(int(m.group("index")))
        else:
            quoted = m.group("sq") if m.group("sq") is not None else m.group("dq")
            steps.append(re.sub(r"\\(.)", r"\1", quoted))
        pos = m.end()
    return tuple(steps)


def resolve_json_path(document: Any, steps: tuple[Step, ...]) -> tuple[bool, Any]:
    """``(True, value)`` when every step exists in the document, else ``(False, None)``."""
    current = document
    for step in steps:
        if isinstance(step, int):
            if not isinstance(current, list) or not -len(current) <= step < len(current):
                return False, None
            current = current[step]
        else:
            if not isinstance(current, dict) or step not in current:
                return False, None
            current = current[step]
    return True, current


def json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON means it: ``true`` is not ``1`` and ``"1"`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)
