"""Notification targets: who is told that a task waits for an approval, halted, or is stuck.

    notify:                                   # workflow level: halts and stuck tasks
      halted: [{email: ops@example.com}]
      stuck:  [{slack: https://hooks.slack.com/services/T000/B000/XXX}]
    steps:
      - id: approve
        kind: human
        stuck_after: 2h                       # any step: tell notify.stuck after this long
        notify:                               # a human step: tell these when it waits
          - {webhook: https://example.com/hooks/approvals, secret_env: APPROVALS_HOOK_SECRET}
          - {email: approvers@example.com}

A target is data, checked here at load time: a webhook or Slack URL is http(s) with a host,
an email address has one ``@`` and a dotted domain, and ``secret_env`` names the worker's
environment variable that holds the webhook's signing secret (the secret itself is never in
a definition, a task or the store)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from statewright._canonical import sha256_hex
from statewright._record import record
from statewright.definition._env import env_name_problem

MAX_TARGETS = 20  # targets in one list
MAX_ADDRESS_CHARS = 2048
_EMAIL = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+")
_URL_CHARS = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no spaces or control characters


class NotifyKind(StrEnum):
    WEBHOOK = "webhook"  # a JSON body signed with HMAC-SHA256
    EMAIL = "email"  # SMTP, the server from the worker's environment
    SLACK = "slack"  # a Slack-compatible incoming webhook: {"text": ...}


class NotifyEvent(StrEnum):
    """What a notification is about."""

    APPROVAL = "approval"  # a human step waits for its approvers
    HALTED = "halted"  # the task halted and is in the operator queue
    STUCK = "stuck"  # the task is at one step longer than its stuck_after


@record
class NotifyTarget:
    """Where a notification goes: a webhook URL or an email address (and a webhook's signing
    secret)."""

    kind: NotifyKind
    address: str  # the URL, or the email address
    secret_env: str = ""  # a webhook's signing secret: the name of a worker variable

    def to_dict(self) -> dict[str, str]:
        out = {self.kind.value: self.address}
        if self.secret_env:
            out["secret_env"] = self.secret_env
        return out

    @property
    def target_id(self) -> str:
        """Stable and short: part of the notification's idempotency key."""
        return f"{self.kind.value}-{sha256_hex(self.to_dict())[:12]}"

    def describe(self) -> str:
        """The target as logs and events show it: the kind and the host or address, never a
        URL's path or query (a Slack URL's path is its credential)."""
        if self.kind is NotifyKind.EMAIL:
            return f"email {self.address}"
        return f"{self.kind.value} {urlsplit(self.address).netloc}"


def target_from_dict(data: Mapping[str, Any]) -> NotifyTarget:
    """Rebuild a target checked at load time (a command's body)."""
    for kind in NotifyKind:
        if kind.value in data:
            return NotifyTarget(kind, str(data[kind.value]), str(data.get("secret_env", "")))
    msg = f"not a notification target: {sorted(data)}"
    raise ValueError(msg)


_SHAPES = "{webhook: URL, secret_env: NAME}, {email: ADDRESS} or {slack: URL}"


def parse_targets(value: object, where: str, problems: list[str]) -> tuple[NotifyTarget, ...]:
    """A list of targets; each problem is appended to ``problems`` as one line."""
    if not isinstance(value, list):
        problems.append(f"{where}: must be a list of targets, each {_SHAPES}")
        return ()
    if len(value) > MAX_TARGETS:
        problems.append(f"{where}: {len(value)} targets; at most {MAX_TARGETS}")
        return ()
    out: list[NotifyTarget] = []
    for i, raw in enumerate(value):
        target = _parse_target(raw, f"{where}[{i}]", problems)
        if target is None:
            continue
        if target in out:
            problems.append(f"{where}[{i}]: {target.describe()} is listed twice")
            continue
        out.append(target)
    return tuple(out)


def parse_workflow_notify(value: object, problems: list[str]) -> dict[NotifyEvent, tuple[NotifyTarget, ...]]:
    """The workflow's ``notify: {halted: [...], stuck: [...]}``."""
    events = (NotifyEvent.HALTED, NotifyEvent.STUCK)
    if not isinstance(value, Mapping):
        problems.append(f"notify: must be a mapping {{halted: [TARGET...], stuck: [TARGET...]}}, got "
                        f"{type(value).__name__}")
        return {}
    out: dict[NotifyEvent, tuple[NotifyTarget, ...]] = {}
    for key, targets in value.items():
        if key not in {e.value for e in events}:
            problems.append(f"notify: unknown event {key!r}; use halted or stuck (a human step names its own "
                            "approval targets under its notify)")
            continue
        out[NotifyEvent(key)] = parse_targets(targets, f"notify.{key}", problems)
    return out


def _parse_target(raw: object, where: str, problems: list[str]) -> NotifyTarget | None:
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: a target must be {_SHAPES}, got {type(raw).__name__}")
        return None
    kinds = [k for k in NotifyKind if k.value in raw]
    if len(kinds) != 1:
        problems.append(f"{where}: a target must be exactly one of {_SHAPES}; got the keys {sorted(map(str, raw))}")
        return None
    kind = kinds[0]
    allowed = {kind.value, "secret_env"} if kind is NotifyKind.WEBHOOK else {kind.value}
    unknown = sorted(str(k) for k in raw if k not in allowed)
    if unknown:
        problems.append(f"{where}: unknown field(s) {unknown} for {kind.value} targets; allowed: {sorted(allowed)}")
        return None
    address = raw[kind.value]
    problem = _email_problem(address) if kind is NotifyKind.EMAIL else _url_problem(address)
    if problem is not None:
        problems.append(f"{where}: {kind.value}: {problem}")
        return None
    secret_env = ""
    if kind is NotifyKind.WEBHOOK:
        if "secret_env" not in raw:
            problems.append(f"{where}: a webhook needs secret_env, the name of the worker's variable that holds "
                            "its signing secret")
            return None
        problem = env_name_problem(raw["secret_env"])
        if problem is not None:
            problems.append(f"{where}: secret_env: {problem}")
            return None
        secret_env = str(raw["secret_env"])
    return NotifyTarget(kind, str(address), secret_env)


def _url_problem(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return f"must be an http:// or https:// URL, got {type(value).__name__}"
    if len(value) > MAX_ADDRESS_CHARS or not _URL_CHARS.fullmatch(value):
        return (f"{value[:80]!r} is not a URL (printable ASCII without spaces, at most "
                f"{MAX_ADDRESS_CHARS} characters)")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return f"{value[:80]!r} is not a URL"
    if parts.scheme not in ("http", "https"):
        return f"{value[:80]!r}: the scheme must be http or https, not {parts.scheme or 'none'!r}"
    if not parts.hostname:
        return f"{value[:80]!r} names no host"
    if parts.username is not None or parts.password is not None:
        return f"{parts.hostname}: a URL with a user name or password; a webhook's secret goes in secret_env"
    del port
    return None


def _email_problem(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return f"must be an email address, got {type(value).__name__}"
    if len(value) > 254 or not _EMAIL.fullmatch(value):
        return f"{value[:80]!r} is not an email address (one name@domain.example)"
    return None
