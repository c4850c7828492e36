"""People and roles for the embedded mode: a small JSON file beside the database."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from statewright._errors import InputError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


def users_file(db: str) -> Path:
    env = os.environ.get("STATEWRIGHT_USERS")
    if env:
        return Path(env)
    if db.startswith(("postgresql://", "postgres://")):
        return Path(".statewright/users.json")
    return Path(db).parent / "users.json"


class Users:
    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, list[str]]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"{self.path}: cannot read the users file ({exc})") from None
        users = data.get("users", {}) if isinstance(data, dict) else {}
        return {str(k): [str(r) for r in v.get("roles", [])] for k, v in users.items()}

    def roles(self, name: str) -> tuple[str, ...]:
        return tuple(self._read().get(name, []))

    def all(self) -> dict[str, list[str]]:
        return self._read()

    def add(self, name: str, roles: list[str]) -> None:
        if not _NAME.match(name):
            msg = f"user name {name!r} must be letters, digits, _ . @ - (no ':', which marks agents)"
            raise InputError(msg)
        users = self._read()
        have = users.setdefault(name, [])
        for r in roles:
            if r not in have:
                have.append(r)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = {"users": {k: {"roles": v} for k, v in sorted(users.items())}}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.path)
