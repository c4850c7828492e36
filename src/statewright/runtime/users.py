"""People prove who they are: a token names the person, the store says what roles they hold.

Tokens are random (256 bits), shown once when issued and kept only as their sha256 in the
store (``store/people.py``), beside the people, their roles and the log of every change.
Only an admin changes people; the first admin comes from ``bootstrap`` on a store where no
one is admin. Every act naming a person (approve, reject, retry, cancel, changing people)
authenticates that person's token again, so a revoked token stops working at once, and
the worker checks the approver again before it performs a step after an approval. Both
refuse a person, role or token that the tables hold but the people log does not grant."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import field
from pathlib import Path

from statewright._errors import AuthenticationError, InputError, PermissionDeniedError
from statewright._names import ADMIN_ROLE, holds_role, is_agent_name, person_name_problem
from statewright._record import record
from statewright.definition.model import Step, StepKind
from statewright.machine.paths import RefError
from statewright.machine.state import Outcome, TaskState
from statewright.machine.task import approver_scope
from statewright.runtime.clock import Clock
from statewright.store.base import PeopleAction, PeopleChange, PeopleLogEntry, Person, Store, TokenRow

TOKEN_ENV = "STATEWRIGHT_TOKEN"
_TOKEN = re.compile(r"swt_[A-Za-z0-9_-]{43}")


@record
class Principal:
    """A person who proved who they are with a token (``Users.authenticate``). Each act
    authenticates the token again: holding a Principal grants nothing once it is revoked."""

    name: str
    roles: tuple[str, ...]
    token_id: str
    token: str = field(repr=False, compare=False)


@record
class Issued:
    """A new token: ``token`` is shown once and never stored (only its sha256 is)."""

    name: str
    token_id: str
    token: str = field(repr=False)


def token_hash(token: str) -> str:
    """sha256 is enough for a 256-bit random secret: there is nothing to guess."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def read_token(token_file: str | Path | None = None) -> str:
    """The token from ``token_file`` (one line), else from STATEWRIGHT_TOKEN."""
    if token_file is not None:
        try:
            text = Path(token_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise AuthenticationError(f"--token-file {token_file}: cannot read the token ({why})") from None
        where = f"--token-file {token_file}"
    else:
        text = os.environ.get(TOKEN_ENV, "")
        where = TOKEN_ENV
        if not text:
            raise AuthenticationError(
                f"this act needs your token: set {TOKEN_ENV} or pass --token-file PATH "
                "(an admin issues one with 'statewright users token NAME')"
            )
    token = text.strip()
    if _TOKEN.fullmatch(token) is None:
        raise AuthenticationError(f"{where} does not hold a statewright token (swt_ and 43 more characters)")
    return token


class Users:
    """People, roles and tokens of one store. Changes take the acting admin's Principal."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    # --- who is acting -----------------------------------------------------------------
    def authenticate(self, token: str) -> Principal:
        if not isinstance(token, str) or _TOKEN.fullmatch(token) is None:
            raise AuthenticationError("that is not a statewright token (swt_ and 43 more characters)")
        holder = self.store.token_holder(token_hash(token))
        if holder is None:
            raise AuthenticationError("the token is unknown or revoked, or its person was removed")
        token_id, name, roles = holder
        return Principal(name, roles, token_id, token)

    def check(self, by: object, *, role: str | None = None, as_name: str | None = None,
              act: str = "act") -> Principal:
        """``by`` authenticated again now, holding ``role`` and, given ``as_name``, named so."""
        if not isinstance(by, Principal):
            shown = f"the name {by!r}" if isinstance(by, str) else type(by).__name__
            raise AuthenticationError(
                f"to {act}, pass the Principal that engine.users.authenticate(token) returns, not {shown}"
            )
        who = self.authenticate(by.token)
        if as_name is not None and as_name != who.name:
            raise PermissionDeniedError(
                f"--as {as_name!r} is not the token's person ({who.name!r}); a token acts only as its own person"
            )
        if role is not None and role not in who.roles:
            raise PermissionDeniedError(
                f"{who.name!r} lacks the role {role!r} needed to {act} (has: {', '.join(who.roles) or 'none'})"
            )
        return who

    # --- changes (an admin's) ----------------------------------------------------------
    def bootstrap(self, name: str) -> Issued:
        """The first admin and their token, on a store where no one is admin; refused after."""
        issued = _new_token(name)
        self._change(None, [PeopleChange(PeopleAction.BOOTSTRAP, name, (ADMIN_ROLE,)), _issue(issued)])
        return issued

    def add(self, by: Principal, name: str, roles: Sequence[str]) -> Person:
        self._change(by, [PeopleChange(PeopleAction.ADD, name, tuple(roles))])
        return self.person(name)

    def drop_roles(self, by: Principal, name: str, roles: Sequence[str]) -> Person:
        self._change(by, [PeopleChange(PeopleAction.DROP_ROLES, name, tuple(roles))])
        return self.person(name)

    def remove(self, by: Principal, name: str) -> None:
        """``name`` may no longer act; their tokens are revoked. The log keeps them."""
        self._change(by, [PeopleChange(PeopleAction.REMOVE, name)])

    def issue_token(self, by: Principal, name: str) -> Issued:
        issued = _new_token(name)
        self._change(by, [_issue(issued)])
        return issued

    def revoke_token(self, by: Principal, token_id: str) -> None:
        self._change(by, [PeopleChange(PeopleAction.REVOKE_TOKEN, token_id=token_id)])

    def import_file(self, by: Principal, path: str | Path) -> list[Person]:
        """The people and roles of an old ``users.json`` (``{"users": {NAME: {"roles": [...]}}}``),
        added in one change; tokens are issued afterwards, one by one."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise InputError(f"{path}: cannot read the users file ({exc})") from None
        people = data.get("users") if isinstance(data, dict) else None
        if not isinstance(people, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("roles"), list) and all(isinstance(r, str) for r in v["roles"])
            for v in people.values()
        ):
            raise InputError(f'{path}: expected {{"users": {{NAME: {{"roles": [ROLE, ...]}}}}}}')
        changes = [PeopleChange(PeopleAction.ADD, str(n), tuple(v["roles"])) for n, v in sorted(people.items())]
        if changes:
            self._change(by, changes)
        return [self.person(c.subject) for c in changes]

    def _change(self, by: Principal | None, changes: list[PeopleChange]) -> list[PeopleLogEntry]:
        for c in changes:
            problem = person_name_problem(c.subject) if c.subject else None
            if problem is not None:
                raise InputError(problem)
        if by is None:
            return self.store.change_people(changes, by_token_hash=None, at_ms=self.clock.now_ms())
        who = self.check(by, act="change people")
        return self.store.change_people(changes, by_token_hash=token_hash(who.token), at_ms=self.clock.now_ms())

    # --- reading -----------------------------------------------------------------------
    def person(self, name: str) -> Person:
        for p in self.store.people():
            if p.name == name:
                return p
        raise InputError(f"no person named {name!r}; see 'statewright users list'")

    def people(self) -> list[Person]:
        return self.store.people()

    def tokens(self) -> list[TokenRow]:
        return self.store.tokens()

    def log(self) -> list[PeopleLogEntry]:
        return self.store.people_log()

    def problems(self) -> list[str]:
        return self.store.people_problems()


def _new_token(name: str) -> Issued:
    import secrets  # here: issuing a token is rare, and secrets pulls in base64 and hmac

    return Issued(name, f"tk_{secrets.token_hex(6)}", f"swt_{secrets.token_urlsafe(32)}")


def _issue(issued: Issued) -> PeopleChange:
    return PeopleChange(PeopleAction.ISSUE_TOKEN, issued.name, token_id=issued.token_id,
                        token_hash=token_hash(issued.token))


def approval_problem(store: Store, state: TaskState, step_id: str) -> str | None:
    """Why a step of ``state`` may not run now (None when it may): authorisation is checked
    again when the work an approval let through is about to run. Each human step before
    ``step_id`` whose latest attempt is an approval must still hold: its approver active,
    still holding the step's role, the token they approved with not revoked, and all of that
    what the people log's rows about them grant (store/people.py ``grant_problem``)."""
    wf = state.workflow
    index = wf.index_of(step_id)
    for gate in wf.steps[:index]:
        if gate.kind is not StepKind.HUMAN:
            continue
        mine = state.attempts_of(gate.id)
        if not mine or mine[-1].outcome is not Outcome.PASSED or is_agent_name(mine[-1].actor):
            continue
        actor = mine[-1].actor
        token_id = next((a.token_id for a in reversed(state.approvals) if a.step == gate.id and a.actor == actor), "")
        problem = store.grant_problem(actor, token_id)
        if problem is not None:
            return f"{actor!r}, who approved {gate.id!r}: {problem}; {step_id!r} is not performed"
        roles = store.still_holds(actor, token_id)
        if roles is None:
            return (f"{actor!r}, who approved {gate.id!r}, was removed or the token they approved with "
                    f"was revoked; {step_id!r} is not performed")
        role = gate.approvers_role or ""
        if role and not _still_scoped(state, gate, role, roles):
            return (f"{actor!r}, who approved {gate.id!r}, no longer holds the role {role!r} for this task; "
                    f"{step_id!r} is not performed")
    return None


def _still_scoped(state: TaskState, gate: Step, role: str, roles: Sequence[str]) -> bool:
    try:
        scope = approver_scope(state, gate)
    except RefError:
        return False
    return holds_role(role, scope, tuple(roles))
