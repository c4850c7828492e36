"""What a step's process may see of the worker, and what the worker keeps out of the record.

    env = step_env(step.env, step.secrets, os.environ)   # the step's declared variables
    ctx.base_env()  ->  step_base_env() + env + STATEWRIGHT_* step variables  (base.py)
    redactor = Redactor.from_environ(os.environ, extra=[store_url])
    redactor.add(declared secret values, the OpenAI api_key_env value)
    event = redactor.record(event)    # before an executor's result becomes an event

A step's process never inherits the worker's environment: not its database URL
(``STATEWRIGHT_DB``), users file, token, ``PGPASSWORD`` or API keys, so it cannot find the
control plane through it. HOME and TMPDIR point at a private directory made for the one
process and removed after it (``_process.run_process``), not at the worker's home with its
credential files. What a step needs it declares: ``env:`` values and ``secrets:`` names.

Known secret values (declared secrets, and whatever in the worker's environment looks like
a credential: names with a word such as KEY, TOKEN, SECRET, PASSWORD, PASS, AUTH or DSN,
and the password of any URL or ``password=`` DSN) are replaced by ``[redacted]`` in what is
stored: output, notes, verdicts, artifacts, errors, and the worker's log lines. Values
shorter than MIN_SECRET_CHARS are not redacted (they cannot be told from ordinary text).
Redaction catches a value written as it is (or JSON- or URL-escaped); a step that encodes a
secret it was given can still reveal it, so declare a secret only to a step you trust with it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from .._errors import PermanentError
from .base import Reason

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 4

_SECRET_NAME = re.compile(
    r"PASSWORD|PASSWD|SECRET"
    r"|(?:^|_)(?:KEY|APIKEY|TOKEN|PASS|PWD|CREDENTIALS?|AUTH|DSN|COOKIE)(?:_|$)"
)
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD", "SSH_AUTH_SOCK"})
_PLAIN_SETTINGS = frozenset({"true", "false", "none", "null", "yes", "no", "on", "off",
                             "enabled", "disabled", "default", "required", "optional"})
_DSN_PASSWORD = re.compile(r"password\s*=\s*('[^']*'|\S+)", re.IGNORECASE)
# Event fields that identify, never carry output: they are left as they are.
_ID_FIELDS = frozenset({"event_id", "command_id", "step", "type", "at_ms"})


def step_env(declared: Mapping[str, str], secrets: Iterable[str],
             environ: Mapping[str, str], *, step: str = "?") -> dict[str, str]:
    """The variables a step declared: its ``env`` values and its secrets' values taken from
    ``environ``. A declared secret that ``environ`` lacks fails the attempt
    (PermanentError, reason ``missing_credential``)."""
    out = dict(declared)
    missing = []
    for name in secrets:
        value = environ.get(name)
        if value is None:
            missing.append(name)
        else:
            out[name] = value
    if missing:
        msg = (
            f"step {step!r} declares secret(s) {', '.join(missing)} that the worker's "
            "environment does not have; export them for the worker"
        )
        raise PermanentError(msg, reason=Reason.MISSING_CREDENTIAL)
    return out


def secrets_in(environ: Mapping[str, str], extra: Iterable[str] = ()) -> set[str]:
    """Values in ``environ`` (and the ``extra`` strings, such as the store's URL) that look
    like credentials: variables named like one, and passwords inside URLs and DSNs."""
    found: set[str] = set()
    for name, value in environ.items():
        if name not in _NOT_SECRET_NAMES and _SECRET_NAME.search(name.upper()):
            found.add(value)
        found |= _embedded_passwords(value)
        if name in {"STATEWRIGHT_DB", "DATABASE_URL"}:
            found.add(value)
    for value in extra:
        found |= _embedded_passwords(value)
    return {v for v in found if len(v) >= MIN_SECRET_CHARS and not _plain_setting(v)}


def _plain_setting(value: str) -> bool:
    """A value such as ``true`` or ``8080`` in a variable named like a credential
    (``USE_AUTH=true``) is a setting, not a secret: redacting it would mangle output."""
    return value.lower() in _PLAIN_SETTINGS or value.isdigit()


def _embedded_passwords(value: str) -> set[str]:
    out: set[str] = set()
    if "://" in value:
        try:
            password = urllib.parse.urlsplit(value.strip()).password
        except ValueError:
            password = None
        if password:
            out |= {password, urllib.parse.unquote(password)}
    for match in _DSN_PASSWORD.finditer(value):
        out.add(match.group(1).strip("'"))
    return out


class Redactor:
    """Replaces known secret values with ``[redacted]`` in text and in JSON-like values."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._forms: list[str] = []
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> Redactor:
        """Know these values too (each also as it looks JSON- and URL-escaped)."""
        forms = set(self._forms)
        for s in secrets:
            if not isinstance(s, str) or len(s) < MIN_SECRET_CHARS:
                continue
            forms |= {s, json.dumps(s)[1:-1], urllib.parse.quote(s, safe="")}
        self._forms = sorted((f for f in forms if len(f) >= MIN_SECRET_CHARS), key=len, reverse=True)
        return self

    def with_secrets(self, secrets: Iterable[str]) -> Redactor:
        """A copy that also knows ``secrets``. The forms known already are copied as they are:
        escaping them again would add escaped escapes, more at every copy."""
        copy = Redactor()
        copy._forms = list(self._forms)
        return copy.add(secrets)

    def __bool__(self) -> bool:
        return bool(self._forms)

    def text(self, text: str) -> str:
        for form in self._forms:
            if form in text:
                text = text.replace(form, REDACTED)
        return text

    def value(self, value: Any) -> Any:
        """``value`` with every string in it redacted (dicts, lists, tuples and dataclasses
        walked)."""
        if not self._forms:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.value(v) for v in value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return self.record(value)
        return value

    def record(self, record: Any) -> Any:
        """A frozen dataclass (an event) with every output-carrying field redacted."""
        if not self._forms or not dataclasses.is_dataclass(record) or isinstance(record, type):
            return record
        changes = {}
        for f in dataclasses.fields(record):
            if f.name in _ID_FIELDS:
                continue
            before = getattr(record, f.name)
            after = self.value(before)
            if after != before:
                changes[f.name] = after
        return dataclasses.replace(record, **changes) if changes else record


class RedactingFilter(logging.Filter):
    """A logging filter that redacts every secret any worker of this process knows."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._redactor = Redactor()

    def know(self, secrets: Iterable[str]) -> None:
        with self._lock:
            self._redactor = self._redactor.with_secrets(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        redactor = self._redactor
        if redactor:
            record.msg = redactor.text(record.getMessage())
            record.args = None
        return True


LOG_FILTER = RedactingFilter()
