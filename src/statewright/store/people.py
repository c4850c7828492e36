"""People, roles and tokens in the store (both backends), changed only through a log.

``sw_users`` and ``sw_tokens`` are what authentication reads; ``sw_user_log`` is the
append-only record of every change (who, what, when), linked by the same chain as a task's
events (store/chain.py: every column covered, the format recorded per link, keyed with
STATEWRIGHT_CHAIN_KEY when it is set). A change and its log row are written in ONE
transaction that first checks the actor: the active token of an admin, or nobody at all for
the bootstrap of the first admin while the log is empty and no one is admin.

Two checks read the log:
- ``people_problems`` walks the whole chain and replays it; the tables must be exactly what
  it gives, so a person, role or token written behind statewright's back shows up there
  (``statewright verify`` and ``users audit``);
- ``grant_problem`` is the cheap one made on every authentication and before approved work
  runs: the log rows about ONE person, each link recomputed (keyed rows with the key; no
  unkeyed row after the log's first keyed one), replayed, must give that person's row and
  the token presented. A grant written into the tables without a log row, or with a row
  whose link could not be made without the key, is refused."""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from statewright._canonical import canonical_json
from statewright._errors import AuthenticationError, InputError, PermissionDeniedError
from statewright._names import ADMIN_ROLE, person_name_problem, scoped_role_problem
from statewright.store.base import PeopleAction, PeopleChange, PeopleLogEntry, Person, TokenRow
from statewright.store.chain import GENESIS_HASH, KEY_ENV, Chain, RawPeopleRow, check_chain, link_format

BOOTSTRAP_ACTOR = "system:bootstrap"
_RACE_RETRIES = 5
_LOG_COLS = "seq, at_ms, actor, action, subject, body, prev_hash, hash"
_MAX_SHOWN = 300


class _Replay:
    """People and tokens as the log's changes, applied in order, leave them."""

    def __init__(self) -> None:
        self.users: dict[str, tuple[set[str], bool]] = {}  # name -> (roles, active)
        self.tokens: dict[str, tuple[str, str, bool]] = {}  # id -> (name, hash, revoked)

    def apply(self, body: dict[str, Any]) -> None:
        action = PeopleAction(str(body.get("action")))
        subject, roles = str(body.get("subject", "")), {str(r) for r in body.get("roles") or []}
        had = self.users.get(subject, (set(), False))
        if action in (PeopleAction.BOOTSTRAP, PeopleAction.ADD):
            self.users[subject] = (had[0] | roles, True)
        elif action is PeopleAction.DROP_ROLES:
            self.users[subject] = (had[0] - roles, had[1])
        elif action is PeopleAction.REMOVE:
            self.users[subject] = (had[0], False)
            self.tokens.update({t: (n, h, True) for t, (n, h, _) in self.tokens.items() if n == subject})
        elif action is PeopleAction.ISSUE_TOKEN:
            self.tokens[str(body.get("token_id"))] = (subject, str(body.get("token_hash")), False)
        elif action is PeopleAction.REVOKE_TOKEN and str(body.get("token_id")) in self.tokens:
            name, h, _ = self.tokens[str(body.get("token_id"))]
            self.tokens[str(body.get("token_id"))] = (name, h, True)


def _body_problem(row: RawPeopleRow) -> tuple[dict[str, Any] | None, str | None]:
    """The row's body as a people change, and what is wrong with it or with its columns."""
    try:
        body = json.loads(row.body) if isinstance(row.body, str) else None
        if not isinstance(body, dict):
            raise ValueError(f"not a JSON object (got {type(body).__name__})")
        PeopleAction(str(body.get("action")))
        roles = body.get("roles", [])
        if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
            raise ValueError(f"roles {roles!r} are not a list of names")
    except (ValueError, RecursionError) as exc:
        return None, f"the body is not a people change ({' '.join(str(exc).split())[:80]})"
    for column in ("seq", "at_ms", "actor", "action", "subject"):
        value, said = getattr(row, column), body.get(column)
        if said != value or type(said) is not type(value):
            return body, f"column {column} is {value!r} but the body says {said!r}"
    return body, None


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

    chain: Chain  # the store's: links people log rows as it links event rows

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
            if self._admins_txn(cur) or self._x(cur, "SELECT 1 FROM sw_user_log LIMIT 1").fetchone():
                raise PermissionDeniedError(
                    "an admin exists already (the people log has changes); bootstrap is only for a new "
                    "store (an admin adds people with 'statewright users add')"
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
                        *(scoped_role_problem(r) for r in roles)]:
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
        seq, prev = (int(last[0]) + 1, str(last[1])) if last else (1, GENESIS_HASH)
        body = canonical_json({
            "seq": seq, "at_ms": at_ms, "actor": actor, "action": c.action.value, "subject": subject,
            "roles": list(roles), "token_id": c.token_id, "token_hash": c.token_hash,
        })
        h = self.chain.people_link(seq, at_ms, actor, c.action.value, subject, prev, body)
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
        """(token id, name, roles) of an active token of an active person, None when there is
        none; AuthenticationError when the tables grant it but the people log does not."""
        row = self._x(
            cur,
            "SELECT t.token_id, u.name, u.roles FROM sw_tokens t JOIN sw_users u ON u.name = t.name"
            " WHERE t.token_hash = ? AND t.revoked_at_ms IS NULL AND u.active = 1",
            (token_hash,),
        ).fetchone()
        if row is None:
            return None
        token_id, name = str(row[0]), str(row[1])
        problem = self._grant_problem_txn(cur, name, token_id)
        if problem is not None:
            raise AuthenticationError(f"the token names {name!r}, but {problem}")
        return token_id, name, _roles(row[2])

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

    def grant_problem(self, name: str, token_id: str = "") -> str | None:
        with self._stmt() as cur:
            return self._grant_problem_txn(cur, name, token_id)

    def _grant_problem_txn(self, cur: Any, name: str, token_id: str) -> str | None:
        """Why ``name``'s row (and, given ``token_id``, that token's row) is not what the people
        log grants them, or None when it is. Reads only the log rows about ``name``: each must
        link as its format says (a keyed link under this store's key, and no unkeyed link
        after the log's first keyed one) and its columns must be its body; replayed, they must
        give the tables' row. With a key, the log's last link must be keyed by it. Cheap
        enough for every authentication; the whole chain is walked by ``people_problems``."""
        rows = [RawPeopleRow(*r) for r in self._x(
            cur, f"SELECT {_LOG_COLS} FROM sw_user_log WHERE subject = ? ORDER BY seq", (name,)).fetchall()]
        # the predicate is the partial index's own (sw_user_log_keyed), written out so the
        # planner can use it
        first = self._x(cur, "SELECT MIN(seq) FROM sw_user_log WHERE hash LIKE 'hmac:%'").fetchone()
        first_keyed = first[0] if first is not None else None
        last = None
        if self.chain.key is not None:  # the last link covers the rest: it must be one only the key makes
            row = self._x(cur, "SELECT hash FROM sw_user_log ORDER BY seq DESC LIMIT 1").fetchone()
            last = None if row is None else str(row[0])
        tok = None
        if token_id:
            got = self._x(cur, "SELECT name, token_hash, revoked_at_ms FROM sw_tokens WHERE token_id = ?",
                          (token_id,)).fetchone()
            tok = None if got is None else (str(got[0]), str(got[1]), got[2] is not None)
        return grant_problem_of(self.chain, name, rows, first_keyed, last, self._person_txn(cur, name), token_id, tok)

    def people(self) -> list[Person]:
        with self._stmt() as cur:
            rows = self._x(cur, "SELECT name, roles, active FROM sw_users ORDER BY name").fetchall()
        return [_person(r) for r in rows]

    def tokens(self) -> list[TokenRow]:
        with self._stmt() as cur:
            rows = self._x(cur, "SELECT token_id, name, issued_at_ms, revoked_at_ms FROM sw_tokens"
                                " ORDER BY issued_at_ms, token_id").fetchall()
        return [TokenRow(str(r[0]), str(r[1]), int(r[2]), None if r[3] is None else int(r[3])) for r in rows]

    def raw_people_log(self) -> list[RawPeopleRow]:
        """The people log's rows exactly as the database returns them, in seq order."""
        with self._stmt() as cur:
            return [RawPeopleRow(*r) for r in self._x(cur, f"SELECT {_LOG_COLS} FROM sw_user_log ORDER BY seq")]

    def people_log(self) -> list[PeopleLogEntry]:
        out = []
        for r in self.raw_people_log():
            try:
                body = json.loads(r.body)
                roles = tuple(str(x) for x in body.get("roles", []))
                token_id = str(body.get("token_id", ""))
            except (ValueError, AttributeError, TypeError, RecursionError):
                roles, token_id = (), ""
            out.append(PeopleLogEntry(_int_or(r.seq), _int_or(r.at_ms), str(r.actor), str(r.action), str(r.subject),
                                      roles, token_id, str(r.prev_hash), str(r.hash)))
        return out

    def people_problems(self) -> list[str]:
        """Walk the people log's chain (as a task's, store/chain.py), check each row's columns
        against its body, replay it: the people and tokens tables must be exactly what the
        log gives. Each problem is one line; a hostile row never raises."""
        problems: list[str] = []
        try:
            self._people_problems(problems)
        except Exception as exc:  # a hostile row must end as a problem, whatever it breaks
            problems.append(f"the people log cannot be checked: {type(exc).__name__}: {exc}")
        return [_one_line(p) for p in problems]

    def _people_problems(self, problems: list[str]) -> None:
        rows = self.raw_people_log()
        check_chain(rows, self.chain, problems.append, row="people log", number="row")
        replay = _Replay()
        for at, row in enumerate(rows, start=1):
            where = f"people log row {row.seq}" if isinstance(row.seq, int) else f"people log row at position {at}"
            body, problem = _body_problem(row)
            if problem is not None:
                problems.append(f"{where}: {problem}")
            if body is None:
                return  # nothing after it can be replayed
            replay.apply(body)
        stored = {p.name: (set(p.roles), p.active) for p in self.people()}
        for name in sorted(set(replay.users) | set(stored)):
            if replay.users.get(name) != stored.get(name):
                problems.append(f"person {name!r}: the table says {_shown(stored.get(name))}, "
                                f"the people log {_shown(replay.users.get(name))}")
        with self._stmt() as cur:
            rows2 = self._x(cur, "SELECT token_id, name, token_hash, revoked_at_ms FROM sw_tokens").fetchall()
        stored_tokens = {str(r[0]): (str(r[1]), str(r[2]), r[3] is not None) for r in rows2}
        for tid in sorted(set(replay.tokens) | set(stored_tokens)):
            if replay.tokens.get(tid) != stored_tokens.get(tid):
                problems.append(f"token {tid!r}: the table differs from the people log "
                                "(a token written, moved or un-revoked behind statewright's back)")

    def rechain_people(self, last_hash: str, links: Sequence[tuple[str, str]]) -> bool:
        """Replace the (prev_hash, hash) of log rows 1..len(links) with ``links`` in one
        transaction, only while the log still ends at ``last_hash`` (for ``db upgrade``).
        False (nothing written) when a change came in meanwhile."""
        with self._tx() as cur:
            self._lock_people_txn(cur)
            last = self._x(cur, "SELECT seq, hash FROM sw_user_log ORDER BY seq DESC LIMIT 1").fetchone()
            if last is None or int(last[0]) != len(links) or str(last[1]) != last_hash:
                return False
            for seq, (prev, h) in enumerate(links, start=1):
                self._x(cur, "UPDATE sw_user_log SET prev_hash = ?, hash = ? WHERE seq = ?", (prev, h, seq))
        return True


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _MAX_SHOWN else line[: _MAX_SHOWN - 3] + "..."


def _int_or(value: Any) -> int:
    return value if isinstance(value, int) else -1


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


def grant_problem_of(
    chain: Chain, name: str, rows: Sequence[RawPeopleRow], first_keyed: int | None, last_hash: str | None,
    person: Person | None, token_id: str, token: tuple[str, str, bool] | None,
) -> str | None:
    """Why ``name``'s row (``person``) (and, given ``token_id``, that token's row: name, hash, revoked)
    is not what the people log's rows about them grant, or None when it is; both stores
    read the rows and ask this. ``last_hash`` is the log's last link, read when the chain
    has a key; ``first_keyed`` the sequence number of its first keyed link."""
    if chain.key is not None and last_hash is not None and not chain.is_current(last_hash):
        return (f"the people log is not keyed by {KEY_ENV} (its last link is {link_format(last_hash).name}),"
                " so anyone with write access could have written it; 'statewright db upgrade' with the key"
                " set keys it, and 'statewright verify' shows whether it was tampered with")
    replay = _Replay()
    for row in rows:
        where = f"people log row {row.seq}"
        fmt = link_format(str(row.hash))
        if fmt.keyed and fmt.key_id != chain.key_id:
            need = (f"set {KEY_ENV} (key id {fmt.key_id}) to act" if chain.key is None
                    else f"it is keyed with key id {fmt.key_id}, not the key given (key id {chain.key_id})")
            return f"the people log that grants it cannot be checked here: {need}"
        if not fmt.keyed and first_keyed is not None and isinstance(row.seq, int) and row.seq > first_keyed:
            return f"{where} about them is not keyed, but follows keyed ones (written behind statewright's back)"
        try:
            linked = chain.recompute(row) == row.hash
        except (TypeError, ValueError):
            linked = False
        body, problem = _body_problem(row)
        if not linked or problem is not None or body is None:
            return f"{where} about them does not verify; see 'statewright verify'"
        replay.apply(body)
    logged = replay.users.get(name)
    if person is None and logged is None:
        return None  # nobody of that name: nothing is granted, nothing contradicts the log
    if person is None or logged is None or (set(person.roles), person.active) != logged:
        return (f"the people log does not grant what the table says ({_shown(logged)} in the log, "
                f"{_shown(None if person is None else (set(person.roles), person.active))} in the table); "
                "see 'statewright verify'")
    if token_id and token != replay.tokens.get(token_id):
        return (f"the people log did not issue them the token {token_id!r} as the table holds it "
                "(written behind statewright's back); see 'statewright verify'")
    return None
