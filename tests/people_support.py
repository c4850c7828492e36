"""People for tests: a bootstrapped admin, and persons with roles and tokens."""

from __future__ import annotations

from statewright.runtime.engine import Engine
from statewright.runtime.users import Principal


class Team:
    """The store's first admin (``root``), who adds the persons a test needs."""

    def __init__(self, engine: Engine, admin: Principal | None = None) -> None:
        self.engine = engine
        users = engine.users
        self.admin = admin or users.authenticate(users.bootstrap("root").token)

    def add(self, name: str, *roles: str) -> Principal:
        """``name`` with ``roles``, authenticated with a token of their own."""
        users = self.engine.users
        users.add(self.admin, name, roles)
        return users.authenticate(users.issue_token(self.admin, name).token)
