"""The names people and roles may have. Each rule matches the WHOLE name (``fullmatch``):
``re.match`` with ``$`` also accepts a trailing newline, and ``alice\\n`` is not ``alice``
to the separation-of-duty check that compares names."""

from __future__ import annotations

import re

_PERSON = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
_ROLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
ADMIN_ROLE = "admin"  # may change people, roles and tokens
OPERATOR_ROLE = "operator"  # may retry and cancel tasks


def is_agent_name(name: str) -> bool:
    """Agents and the system act as ``kind:name`` (``agent:command``, ``timer:expiry``)."""
    return ":" in name


def person_name_problem(name: str) -> str | None:
    """None when ``name`` may be a person's name; otherwise what is wrong with it."""
    if is_agent_name(name):
        return f"{name!r} names an agent or the system (it has a ':'), never a person"
    if _PERSON.fullmatch(name) is None:
        return (f"user name {name!r} must be 1 to 64 letters, digits, _ . @ - "
                "(starting with a letter or digit)")
    return None


def role_problem(role: str) -> str | None:
    if _ROLE.fullmatch(role) is None:
        return f"role {role!r} must be 1 to 64 letters, digits, _ . - (starting with a letter or digit)"
    return None
