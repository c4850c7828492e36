"""People, roles and tokens in the in-memory store, with the rules of ``store/people.py``:
every change is a row of the chained people log, written with it in one transaction that
first checks the actor (an admin's active token, or nobody for the first admin's bootstrap);
the last admin cannot be removed; ``grant_problem`` replays the log rows about one person
against their row."""

from __future__ import annotations

import json
from collections.abc import Sequence

from statewright._canonical import canonical_json
from statewright._errors import AuthenticationError, InputError, PermissionDeniedError
from statewright._names import ADMIN_ROLE, person_name_problem, scoped_role_problem
from statewright.store.base import PeopleAction, PeopleChange, PeopleLogEntry, Person, TokenRow
from statewright.store.chain import GENESIS_HASH, Chain, RawPeopleRow, check_chain
from statewright.store.memory_tables import Database, Txn
from statewright.store.people import BOOTSTRAP_ACTOR, _body_problem, _one_line, _Replay, _shown, grant_problem_of


class MemoryPeople:
    """The people part of ``MemoryStore`` (a mixin over its database)."""

    db: Database
    chain: Chain

    # --- changes -----------------------------------------------------------------------
    def change_people(
        self, changes: Sequence[PeopleChange], *, by_token_hash: str | None, at_ms: int
    ) -> list[PeopleLogEntry]:
        with self.db.txn() as txn:
            actor = self._actor(changes, by_token_hash)
            return [self._change(txn, actor, c, at_ms) for c in changes]

    def _actor(self, changes: Sequence[PeopleChange], by_token_hash: str | None) -> str:
        if by_token_hash is None:
            if not changes or changes[0].action is not PeopleAction.BOOTSTRAP or any(
                c.action not in (PeopleAction.BOOTSTRAP, PeopleAction.ISSUE_TOKEN) for c in changes
            ):
                raise AuthenticationError(
                    "changing people needs an admin's token (STATEWRIGHT_TOKEN or --token-file)"
                )
            if self._admins() or self.db.people_log:
                raise PermissionDeniedError(
                    "an admin exists already (the people log has changes); bootstrap is only for a new "
                    "store (an admin adds people with 'statewright users add')"
                )
            return BOOTSTRAP_ACTOR
        holder = self.token_holder(by_token_hash)
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

    def _change(self, txn: Txn, actor: str, c: PeopleChange, at_ms: int) -> PeopleLogEntry:
        db = self.db
        subject, roles = c.subject, tuple(sorted(set(c.roles)))
        for problem in [person_name_problem(subject) if c.action is not PeopleAction.REVOKE_TOKEN else None,
                        *(scoped_role_problem(r) for r in roles)]:
            if problem is not None:
                raise InputError(problem)
        person = self._person(subject) if subject else None
        if c.action in (PeopleAction.BOOTSTRAP, PeopleAction.ADD):
            if not roles:
                raise InputError(f"adding {subject!r} needs at least one --role")
            if person is None:
                for other in db.users:
                    if other.casefold() == subject.casefold():
                        raise InputError(f"{subject!r} differs from the existing person {other!r} only in case; "
                                         "one person, one name")
                txn.put(db.users, subject, (roles, True, at_ms))
            else:
                txn.put(db.users, subject, (tuple(sorted(set(person.roles) | set(roles))), True, at_ms))
        elif c.action is PeopleAction.DROP_ROLES:
            person = _must_exist(person, subject)
            kept = tuple(r for r in person.roles if r not in roles)
            self._keep_an_admin(subject, kept if person.active else ())
            txn.put(db.users, subject, (kept, person.active, at_ms))
        elif c.action is PeopleAction.REMOVE:
            person = _must_exist(person, subject)
            self._keep_an_admin(subject, ())
            txn.put(db.users, subject, (person.roles, False, at_ms))
            for tid, (h, name, issued, revoked) in list(db.tokens.items()):
                if name == subject and revoked is None:
                    txn.put(db.tokens, tid, (h, name, issued, at_ms))
        elif c.action is PeopleAction.ISSUE_TOKEN:
            person = _must_exist(person, subject)
            if not person.active:
                raise InputError(f"{subject!r} was removed; add them again before issuing a token")
            if c.token_id in db.tokens or any(h == c.token_hash for h, *_ in db.tokens.values()):
                raise InputError(f"token {c.token_id!r} exists already; issue another")
            txn.put(db.tokens, c.token_id, (c.token_hash, subject, at_ms, None))
        elif c.action is PeopleAction.REVOKE_TOKEN:
            tok = db.tokens.get(c.token_id)
            if tok is None or tok[3] is not None:
                state = "no token" if tok is None else "an already revoked token"
                raise InputError(f"{c.token_id!r} is {state}; see 'statewright users list'")
            subject = tok[1]
            txn.put(db.tokens, c.token_id, (tok[0], tok[1], tok[2], at_ms))
        return self._log(txn, at_ms, actor, c, subject, roles)

    def _keep_an_admin(self, name: str, roles_after: tuple[str, ...]) -> None:
        if ADMIN_ROLE in roles_after:
            return
        if not [a for a in self._admins() if a != name]:
            raise InputError(f"{name!r} is the last admin; make another admin first")

    def _log(
        self, txn: Txn, at_ms: int, actor: str, c: PeopleChange, subject: str, roles: tuple[str, ...]
    ) -> PeopleLogEntry:
        log = self.db.people_log
        last = log[max(log)] if log else None
        seq, prev = (int(last.seq) + 1, str(last.hash)) if last is not None else (1, GENESIS_HASH)
        body = canonical_json({
            "seq": seq, "at_ms": at_ms, "actor": actor, "action": c.action.value, "subject": subject,
            "roles": list(roles), "token_id": c.token_id, "token_hash": c.token_hash,
        })
        h = self.chain.people_link(seq, at_ms, actor, c.action.value, subject, prev, body)
        txn.put(log, seq, RawPeopleRow(seq, at_ms, actor, c.action.value, subject, body, prev, h))
        return PeopleLogEntry(seq, at_ms, actor, c.action.value, subject, roles, c.token_id, prev, h)

    # --- reads -------------------------------------------------------------------------
    def _person(self, name: str) -> Person | None:
        row = self.db.users.get(name)
        return Person(name, row[0], row[1]) if row is not None else None

    def _admins(self) -> list[str]:
        return [n for n, (roles, active, _) in self.db.users.items() if active and ADMIN_ROLE in roles]

    def token_holder(self, token_hash: str) -> tuple[str, str, tuple[str, ...]] | None:
        with self.db.lock:
            for token_id, (h, name, _, revoked) in self.db.tokens.items():
                person = self._person(name)
                if h != token_hash or revoked is not None or person is None or not person.active:
                    continue
                problem = self.grant_problem(name, token_id)
                if problem is not None:
                    raise AuthenticationError(f"the token names {name!r}, but {problem}")
                return token_id, name, person.roles
        return None

    def still_holds(self, name: str, token_id: str) -> tuple[str, ...] | None:
        with self.db.lock:
            person = self._person(name)
            if person is None or not person.active:
                return None
            if token_id:
                tok = self.db.tokens.get(token_id)
                if tok is None or tok[1] != name or tok[3] is not None:
                    return None
            return person.roles

    def grant_problem(self, name: str, token_id: str = "") -> str | None:
        """As ``PeopleSql.grant_problem``: the log rows about ``name``, each link recomputed
        and replayed, must give their row (and that token's)."""
        with self.db.lock:
            log = [self.db.people_log[s] for s in sorted(self.db.people_log)]
            person = self._person(name)
            tok = self.db.tokens.get(token_id) if token_id else None
        rows = [r for r in log if r.subject == name]
        first_keyed = next((r.seq for r in log if str(r.hash).startswith("hmac:")), None)
        last = str(log[-1].hash) if log else None
        stored = None if tok is None else (tok[1], tok[0], tok[3] is not None)
        return grant_problem_of(self.chain, name, rows, first_keyed, last, person, token_id, stored)

    def people(self) -> list[Person]:
        with self.db.lock:
            return [Person(n, roles, active) for n, (roles, active, _) in sorted(self.db.users.items())]

    def tokens(self) -> list[TokenRow]:
        with self.db.lock:
            rows = [TokenRow(tid, name, issued, revoked) for tid, (_, name, issued, revoked) in self.db.tokens.items()]
        return sorted(rows, key=lambda t: (t.issued_at_ms, t.token_id))

    def raw_people_log(self) -> list[RawPeopleRow]:
        with self.db.lock:
            return [self.db.people_log[s] for s in sorted(self.db.people_log)]

    def people_log(self) -> list[PeopleLogEntry]:
        out = []
        for r in self.raw_people_log():
            body = json.loads(r.body)
            out.append(PeopleLogEntry(r.seq, r.at_ms, r.actor, r.action, r.subject,
                                      tuple(str(x) for x in body.get("roles", [])), str(body.get("token_id", "")),
                                      r.prev_hash, r.hash))
        return out

    def people_problems(self) -> list[str]:
        problems: list[str] = []
        rows = self.raw_people_log()
        check_chain(rows, self.chain, problems.append, row="people log", number="row")
        replay = _Replay()
        for row in rows:
            body, problem = _body_problem(row)
            if problem is not None:
                problems.append(f"people log row {row.seq}: {problem}")
            if body is None:
                break
            replay.apply(body)
        else:
            stored = {p.name: (set(p.roles), p.active) for p in self.people()}
            for name in sorted(set(replay.users) | set(stored)):
                if replay.users.get(name) != stored.get(name):
                    problems.append(f"person {name!r}: the table says {_shown(stored.get(name))}, "
                                    f"the people log {_shown(replay.users.get(name))}")
            with self.db.lock:
                stored_tokens = {tid: (name, h, revoked is not None)
                                 for tid, (h, name, _, revoked) in self.db.tokens.items()}
            for tid in sorted(set(replay.tokens) | set(stored_tokens)):
                if replay.tokens.get(tid) != stored_tokens.get(tid):
                    problems.append(f"token {tid!r}: the table differs from the people log "
                                    "(a token written, moved or un-revoked behind statewright's back)")
        return [_one_line(p) for p in problems]

    def rechain_people(self, last_hash: str, links: Sequence[tuple[str, str]]) -> bool:
        with self.db.txn() as txn:
            log = self.db.people_log
            last = log[max(log)] if log else None
            if last is None or last.seq != len(links) or last.hash != last_hash:
                return False
            for seq, (prev, h) in enumerate(links, start=1):
                txn.put(log, seq, log[seq]._replace(prev_hash=prev, hash=h))
        return True


def _must_exist(person: Person | None, name: str) -> Person:
    if person is None:
        raise InputError(f"no person named {name!r}; see 'statewright users list'")
    return person
