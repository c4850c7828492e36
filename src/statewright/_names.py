"""The names people and roles may have. Each rule matches the WHOLE name (``fullmatch``):
``re.match`` with ``$`` also accepts a trailing newline, and ``alice\\n`` is not ``alice``
to the separation-of-duty check that compares names."""

from __future__ import annotations

import re
from collections.abc import Iterable

_PERSON = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
_ROLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
ADMIN_ROLE = "admin"  # may change people, roles and tokens
OPERATOR_ROLE = "operator"  # may retry and cancel tasks
AGENT_ROLE = "agent"  # a remote agent: claims work from a queue (``agent:queue=NAME`` scopes it); never approves
_QUEUE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


def is_agent_identity(roles: Iterable[str]) -> bool:
    """Whether a person holding ``roles`` is a remote agent (the ``agent`` role, for any
    queue): such an identity never approves or rejects."""
    return any(r == AGENT_ROLE or r.startswith(f"{AGENT_ROLE}:") for r in roles)


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


def queue_name_problem(name: object) -> str | None:
    """None when ``name`` may name a remote agents' queue; otherwise what is wrong with it."""
    if not isinstance(name, str) or _QUEUE.fullmatch(name) is None:
        return (f"queue name {name!r} must be 1 to 64 lower-case letters, digits, _ . - "
                "(starting with a letter or digit)")
    return None


def remote_timer_ids(command_id: str) -> tuple[str, str]:
    """The timers of a remote attempt parked as ``command_id``: (the step's timeout, the
    claiming agent's heartbeat deadline). The store writes them; the reducer reads them."""
    return f"{command_id}/timeout", f"{command_id}/heartbeat"


def role_problem(role: str) -> str | None:
    if _ROLE.fullmatch(role) is None:
        return f"role {role!r} must be 1 to 64 letters, digits, _ . - (starting with a letter or digit)"
    return None


# --- scoped roles ---------------------------------------------------------------------------
# A person's role may be scoped: ``finance:region=eu`` (or ``finance:region=eu,entity=de01``)
# holds ``finance`` only for tasks whose scope has every one of those values. An unscoped
# ``finance`` holds it for every task.

_SCOPE_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
_SCOPE_VALUE = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


def split_role(role: str) -> tuple[str, dict[str, str]] | None:
    """``(name, scope)`` of a (possibly scoped) role, or None when it is not well formed."""
    name, sep, rest = role.partition(":")
    if _ROLE.fullmatch(name) is None:
        return None
    if not sep:
        return name, {}
    scope: dict[str, str] = {}
    for pair in rest.split(","):
        key, eq, value = pair.partition("=")
        if not eq or _SCOPE_KEY.fullmatch(key) is None or _SCOPE_VALUE.fullmatch(value) is None or key in scope:
            return None
        scope[key] = value
    return name, scope


def scoped_role_problem(role: str) -> str | None:
    """None when ``role`` may be granted to a person (plain or scoped)."""
    if split_role(role) is None:
        return (f"role {role!r} must be a name of 1 to 64 letters, digits, _ . - (starting with a letter or "
                "digit), optionally scoped as NAME:KEY=VALUE[,KEY=VALUE] (finance:region=eu)")
    return None


def holds_role(role: str, scope: dict[str, str], roles: tuple[str, ...] | list[str]) -> bool:
    """Whether one of ``roles`` grants ``role`` for a task of ``scope``."""
    for held in roles:
        parts = split_role(held)
        if parts is None or parts[0] != role:
            continue
        if all(scope.get(k) == v for k, v in parts[1].items()):
            return True
    return False


def scope_text(scope: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(scope.items()))
