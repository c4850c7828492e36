"""People, roles and tokens in the store (both backends), changed only through a log.

``sw_users`` and ``sw_tokens`` are what authentication reads; ``sw_user_log`` is the
append-only record of every change (who, what, when), hash-chained as a task's events are.
A change and its log row are written in ONE transaction that first checks the actor: the
active token of an admin, or nobody at all for the bootstrap of the first admin while no
one is admin. The tables must be what replaying the log gives (``people_problems``), so a
person, role or token written behind statewright's back shows up there."""

from __future__ import annotations

import hashlib
import json
from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from statewright._canonical import canonical_json
from statewright._errors import AuthenticationError, InputError, PermissionDeniedError
from statewright._names import ADMIN_ROLE, person_name_problem, role_problem
from statewright.store.base import PeopleAction, PeopleChange, PeopleLogEntry, Person, TokenRow

GENESIS = "0" * 64
BOOTSTRAP_ACTOR = "system:bootstrap"
_RACE_RETRIES = 5


def people_hash(prev_hash: str, seq: int, body: str) -> str:
    """The hash of one log row, over the previous row's hash (as a task's events are chained)."""
    return hashlib.sha256(f"{prev_hash}|{seq}|{body}".encode()).hexdigest()


class PeopleSql:
    """The people SQL of ``SqlStore`` (a mixin: it uses the store's transaction hooks)."""

    @abstractmethod
    def _tx(self) -> AbstractContextManager[Any]: ...

    @abstractmethod
    def _stmt(self) -> AbstractContextManager[Any]: ...

    @abstractmethod
    def _x(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> Any: ...

    @abstractmethod
    def _is_unique_violation(self, exc: BaseException) -> bool: ...

    def _lock_people_txn(self, cur: Any) -> None:
        """Serialise people changes. SQLite's BEGIN IMMEDIATE already does; PostgreSQL
        takes an advisory lock, so two admins cannot both remove the last other admin."""
        return None

    # --- changes -----------------------------------------------------------------------
    def change_people(
        self, changes: Sequence[PeopleChange], *, by_token_hash: str | None, at_ms: int
    ) -> list[PeopleLogEntry]:
        attempt = 0
        while True:
            try:
                with self._tx() as cur:
                    self._lock_people_txn(cur)
                    actor = self._actor_txn(cur, changes, by_token_hash)
                    return [self._change_txn(cur, actor, c, at_ms) for c in changes]
            except Exception as exc:
                attempt += 1
                if self._is_unique_violation(exc) and attempt < _RACE_RETRIES:
                    continue  # another change took the same log position: try again
                raise

    def _actor_txn(self, cur: Any, changes: Sequence[PeopleChange], by_token_hash: str | None) -> str:
        if by_token_hash is None:
            if not changes or changes[0].action is not PeopleAction.BOOTSTRAP or any(
                c.action not in (PeopleAction.BOOTSTRAP, PeopleAction.ISSUE_TOKEN) for c in changes
            ):
                raise AuthenticationError(
                    "changing people needs an admin's token (STATEWRIGHT_TOKEN or --token-file)"
                )
            if self._admins_txn(cur):
                raise PermissionDeniedError(
                    "an admin exists already; bootstrap is only for a store without one "
                    "(an admin adds people with 'statewright users add')"
                )
            return BOOTSTRAP_ACTOR
        holder = self._holder_txn(cur, by_token_hash)
        if holder is None:
            raise AuthenticationError("the token is unknown or revoked, or its person was removed")
        _, name, roles = holder
        if ADMIN_ROLE not in roles:
            raise PermissionDeniedError(
                f"{name!r} lacks the role {ADMIN_ROLE!r} needed to change people "
                f"(has: {', '.join(roles) or 'none'})"
            )
        if any(c.action is PeopleAction.BOOTSTRAP for c in changes):
            raise PermissionDeniedError("an admin exists already; use 'statewright users add'")
        return name

    def _change_txn(self, cur: Any, actor: str, c: PeopleChange, at_ms: int) -> PeopleLogEntry:
        subject, roles = c.subject, tuple(sorted(set(c.roles)))
        for problem in [person_name_problem(subject) if c.action is not PeopleAction.REVOKE_TOKEN else None,
                        *(role_problem(r) for r in roles)]:
            if problem is not None:
                raise InputError(problem)
        person = self._person_txn(cur, subject) if subject else None
        if c.action in (PeopleAction.BOOTSTRAP, PeopleAction.ADD):
            if not roles:
                raise InputError(f"adding {subject!r} needs at least one --role")
            if person is None:
                for (other,) in self._x(cur, "SELECT name FROM sw_users").fetchall():
                    if str(other).casefold() == subject.casefold():
                        raise InputError(f"{subject!r} differs from the existing person {other!r} only in case; "
                                         "one person, one name")
                self._x(cur, "INSERT INTO sw_users (name, roles, active, updated_at_ms) VALUES (?, ?, 1, ?)",
                        (subject, _roles_json(roles), at_ms))
            else:
                merged = tuple(sorted(set(person.roles) | set(roles)))
                self._x(cur, "UPDATE sw_users SET roles = ?, active = 1, updated_at_ms = ? WHERE name = ?",
                        (_roles_json(merged), at_ms, subject))
        elif c.action is PeopleAction.DROP_ROLES:
            person = self._must_exist(person, subject)
            kept = tuple(r for r in person.roles if r not in roles)
            self._keep_an_admin_txn(cur, subject, kept if person.active else ())
            self._x(cur, "UPDATE sw_users SET roles = ?, updated_at_ms = ? WHERE name = ?",
                    (_roles_json(kept), at_ms, subject))
        elif c.action is PeopleAction.REMOVE:
            person = self._must_exist(person, subject)
            self._keep_an_admin_txn(cur, subject, ())
            self._x(cur, "UPDATE sw_users SET active = 0, updated_at_ms = ? WHERE name = ?", (at_ms, subject))
            self._x(cur, "UPDATE sw_tokens SET revoked_at_ms = ? WHERE name = ? AND revoked_at_ms IS NULL",
                    (at_ms, subject))
        elif c.action is PeopleAction.ISSUE_TOKEN:
            person = self._must_exist(person, subject)
            if not person.active:
                raise InputError(f"{subject!r} was removed; add them again before issuing a token")
            self._x(cur, "INSERT INTO sw_tokens (token_id, token_hash, name, issued_at_ms) VALUES (?, ?, ?, ?)",
                    (c.token_id, c.token_hash, subject, at_ms))
        elif c.action is PeopleAction.REVOKE_TOKEN:
            row = self._x(cur, "SELECT name, revoked_at_ms FROM sw_tokens WHERE token_id = ?",
                          (c.token_id,)).fetchone()
            if row is None or row[1] is not None:
                state = "no token" if row is None else "an already revoked token"
                raise InputError(f"{c.token_id!r} is {state}; see 'statewright users list'")
            subject = str(row[0])
            self._x(cur, "UPDATE sw_tokens SET revoked_at_ms = ? WHERE token_id = ?", (at_ms, c.token_id))
        return self._log_txn(cur, at_ms, actor, c, subject, roles)

    def _must_exist(self, person: Person | None, name: str) -> Person:
        if person is None:
            raise InputError(f"no person named {name!r}; see 'statewright users list'")
        return person

    def _keep_an_admin_txn(self, cur: Any, name: str, roles_after: tuple[str, ...]) -> None:
        if ADMIN_ROLE in roles_after:
            return
        if not [a for a in self._admins_txn(cur) if a != name]:
            raise InputError(f"{name!r} is the last admin; make another admin first")

    def _log_txn(
        self, cur: Any, at_ms: int, actor: str, c: PeopleChange, subject: str, roles: tuple[str, ...]
    ) -> PeopleLogEntry:
        last = self._x(cur, "SELECT seq, hash FROM sw_user_log ORDER BY seq DESC LIMIT 1").fetchone()
        seq, prev = (int(last[0]) + 1, str(last[1])) if last else (1, GENESIS)
        body = canonical_json({
            "seq": seq, "at_ms": at_ms, "actor": actor, "action": c.action.value, "subject": subject,
            "roles": list(roles), "token_id": c.token_id, "token_hash": c.token_hash,
        })
        h = people_hash(prev, seq, body)
        self._x(cur, "INSERT INTO sw_user_log (seq, at_ms, actor, action, subject, body, prev_hash, hash)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (seq, at_ms, actor, c.action.value, subject, body, prev, h))
        return PeopleLogEntry(seq, at_ms, actor, c.action.value, subject, roles, c.token_id, prev, h)

    # --- reads -------------------------------------------------------------------------
    def _person_txn(self, cur: Any, name: str) -> Person | None:
        row = self._x(cur, "SELECT name, roles, active FROM sw_users WHERE name = ?", (name,)).fetchone()
        return _person(row) if row else None

    def _admins_txn(self, cur: Any) -> list[str]:
        rows = self._x(cur, "SELECT name, roles, active FROM sw_users WHERE active = 1").fetchall()
        return [p.name for p in map(_person, rows) if ADMIN_ROLE in p.roles]

    def _holder_txn(self, cur: Any, token_hash: str) -> tuple[str, str, tuple[str, ...]] | None:
        row = self._x(
            cur,
            "SELECT t.token_id, u.name, u.roles FROM sw_tokens t JOIN sw_users u ON u.name = t.name"
            " WHERE t.token_hash = ? AND t.revoked_at_ms IS NULL AND u.active = 1",
            (token_hash,),
        ).fetchone()
        return (str(row[0]), str(row[1]), _roles(row[2])) if row else None

    def token_holder(self, token_hash: str) -> tuple[str, str, tuple[str, ...]] | None:
        with self._stmt() as cur:
            return self._holder_txn(cur, token_hash)

    def still_holds(self, name: str, token_id: str) -> tuple[str, ...] | None:
        with self._stmt() as cur:
            person = self._person_txn(cur, name)
            if person is None or not person.active:
                return None
            if token_id:
                row = self._x(cur, "SELECT 1 FROM sw_tokens WHERE token_id = ? AND name = ?"
                              " AND revoked_at_ms IS NULL", (token_id, name)).fetchone()
                if row is None:
                    return None
        return person.roles

    def people(self) -> list[Person]:
        with self._stmt() as cur:
            rows = self._x(cur, "SELECT name, roles, active FROM sw_users ORDER BY name").fetchall()
        return [_person(r) for r in rows]

    def tokens(self) -> list[TokenRow]:
        with self._stmt() as cur:
            rows = self._x(cur, "SELECT token_id, name, issued_at_ms, revoked_at_ms FROM sw_tokens"
                                " ORDER BY issued_at_ms, token_id").fetchall()
        return [TokenRow(str(r[0]), str(r[1]), int(r[2]), None if r[3] is None else int(r[3])) for r in rows]

    def people_log(self) -> list[PeopleLogEntry]:
        return [entry for entry, _ in self._log_rows()]

    def _log_rows(self) -> list[tuple[PeopleLogEntry, str]]:
        with self._stmt() as cur:
            rows = self._x(cur, "SELECT seq, at_ms, actor, action, subject, body, prev_hash, hash"
                                " FROM sw_user_log ORDER BY seq").fetchall()
        out = []
        for r in rows:
            try:
                roles = tuple(str(x) for x in json.loads(r[5]).get("roles", []))
                token_id = str(json.loads(r[5]).get("token_id", ""))
            except (ValueError, AttributeError, TypeError):
                roles, token_id = (), ""
            out.append((PeopleLogEntry(int(r[0]), int(r[1]), str(r[2]), str(r[3]), str(r[4]), roles, token_id,
                                       str(r[6]), str(r[7])), str(r[5])))
        return out

    def people_problems(self) -> list[str]:
        """Replay the log: the chain must hold, each row's columns must be its hashed body,
        and the people and tokens tables must be exactly what the log gives."""
        problems: list[str] = []
        users: dict[str, tuple[set[str], bool]] = {}
        tokens: dict[str, tuple[str, str, bool]] = {}  # id -> (name, hash, revoked)
        prev, expected_seq = GENESIS, 1
        for entry, body_text in self._log_rows():
            where = f"people log row {entry.seq}"
            try:
                body = json.loads(body_text)
                if not isinstance(body, dict):
                    raise ValueError("not an object")
                action = PeopleAction(str(body.get("action")))
            except ValueError as exc:
                problems.append(f"{where}: the body is not a people change ({exc})")
                break
            if entry.seq != expected_seq or entry.prev_hash != prev:
                problems.append(f"{where}: the chain is broken (a row before it was removed or reordered)")
            if people_hash(entry.prev_hash, entry.seq, body_text) != entry.hash:
                problems.append(f"{where}: its hash does not match its content (the row was edited)")
            columns = {"seq": entry.seq, "at_ms": entry.at_ms, "actor": entry.actor, "action": entry.action,
                       "subject": entry.subject}
            if any(body.get(k) != v for k, v in columns.items()):
                problems.append(f"{where}: its columns differ from its hashed body (the row was edited)")
            prev, expected_seq = entry.hash, entry.seq + 1
            subject, roles = str(body.get("subject", "")), set(body.get("roles") or [])
            had = users.get(subject, (set(), False))
            if action in (PeopleAction.BOOTSTRAP, PeopleAction.ADD):
                users[subject] = (had[0] | roles, True)
            elif action is PeopleAction.DROP_ROLES:
                users[subject] = (had[0] - roles, had[1])
            elif action is PeopleAction.REMOVE:
                users[subject] = (had[0], False)
                tokens.update({t: (n, h, True) for t, (n, h, _) in tokens.items() if n == subject})
            elif action is PeopleAction.ISSUE_TOKEN:
                tokens[str(body.get("token_id"))] = (subject, str(body.get("token_hash")), False)
            elif action is PeopleAction.REVOKE_TOKEN and str(body.get("token_id")) in tokens:
                name, h, _ = tokens[str(body.get("token_id"))]
                tokens[str(body.get("token_id"))] = (name, h, True)
        stored = {p.name: (set(p.roles), p.active) for p in self.people()}
        for name in sorted(set(users) | set(stored)):
            if users.get(name) != stored.get(name):
                problems.append(f"person {name!r}: the table says {_shown(stored.get(name))}, "
                                f"the people log {_shown(users.get(name))}")
        with self._stmt() as cur:
            rows = self._x(cur, "SELECT token_id, name, token_hash, revoked_at_ms FROM sw_tokens").fetchall()
        stored_tokens = {str(r[0]): (str(r[1]), str(r[2]), r[3] is not None) for r in rows}
        for tid in sorted(set(tokens) | set(stored_tokens)):
            if tokens.get(tid) != stored_tokens.get(tid):
                problems.append(f"token {tid!r}: the table differs from the people log "
                                "(a token written, moved or un-revoked behind statewright's back)")
        return problems


def _shown(value: tuple[set[str], bool] | None) -> str:
    if value is None:
        return "no such person"
    roles, active = value
    return f"roles [{', '.join(sorted(roles))}]{'' if active else ' (removed)'}"


def _roles_json(roles: Sequence[str]) -> str:
    return json.dumps(sorted(set(roles)))


def _roles(text: Any) -> tuple[str, ...]:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return ()
    return tuple(str(r) for r in value) if isinstance(value, list) else ()


def _person(row: Any) -> Person:
    return Person(str(row[0]), _roles(row[1]), bool(int(row[2])))
