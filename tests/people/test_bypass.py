"""The approval-bypass campaign: every way we know to act as someone else, without a token,
without the role, blind, stale or late, tried through the CLI and the Python API on SQLite
and PostgreSQL. Each attempt must be refused with one clear line and change no row."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from statewright._errors import AccessError, ApprovalError, InputError, StatewrightError
from statewright.machine.events import ApprovalGranted
from statewright.runtime.clock import FakeClock, SystemClock
from statewright.runtime.engine import Engine
from statewright.runtime.run import run_task
from statewright.runtime.users import Principal
from statewright.store import open_store
from store.backends import fresh_pg_schema
from tally import tally

from .support import People, duty, flag, gate, hash_of, one_error_line, run_cli, snapshot


@dataclass
class World:
    """One database with tasks parked where people act, and people of every kind:
    bob (author and maintainer) approved the proposal ``waiting`` shows; carol may sign
    off; erin is only an author; ops is an operator; dave's token and exadmin's admin
    token were revoked; frank was removed; gina's Principal was taken before her token
    was revoked."""

    backend: str
    url: str
    dir: Path
    engine: Engine
    people: People
    values: dict[str, str]
    gina: Principal


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    where = tmp_path_factory.mktemp("bypass")
    if request.param == "sqlite":
        yield from _world("sqlite", str(where / "state.db"), where)
        return
    with fresh_pg_schema() as (url, _name):
        yield from _world("postgres", url, where)


def _world(backend: str, url: str, where: Path) -> Iterator[World]:
    engine = Engine(open_store(url), clock=SystemClock(), workspace_root=where / "ws")
    people = People(engine, where)
    bob = people.add("bob", "author", "maintainer")
    for name, roles in {"carol": ["maintainer"], "erin": ["author"], "ops": ["operator"],
                        "dave": ["maintainer", "operator"], "frank": ["maintainer"], "gina": ["maintainer"],
                        "exadmin": ["admin"]}.items():
        people.add(name, *roles)
    gina = engine.users.authenticate(people.tokens["gina"])
    for name in ("dave", "gina", "exadmin"):
        [token] = [t for t in engine.users.tokens() if t.name == name]
        engine.users.revoke_token(people.admin, token.token_id)
    engine.users.remove(people.admin, "frank")

    waiting = engine.submit(duty(), {})
    stale = hash_of(engine, waiting)
    engine.approve(waiting, bob, proposal_hash=stale)
    other = engine.submit(gate(where / "shipped"), {"workspace": str(where)})
    run_task(engine, other)
    halted = engine.submit(flag(where / "never"), {"workspace": str(where)})
    run_task(engine, halted)
    assert engine.state(halted).status.value == "halted"
    past = Engine(open_store(url), clock=FakeClock(SystemClock().now_ms() - 2 * 3_600_000))
    expired = past.submit(duty(), {})
    past.approve(expired, past.users.authenticate(people.tokens["bob"]), proposal_hash=hash_of(past, expired))
    past.close()

    (where / "junk.token").write_text("hunter2\n", encoding="utf-8")
    (where / "unknown.token").write_text("swt_" + "A" * 43 + "\n", encoding="utf-8")
    (where / "evil-users.json").write_text(json.dumps({"users": {"mallory": {"roles": ["maintainer", "admin"]}}}))
    (where / "newline-users.json").write_text(json.dumps({"users": {"bob\n": {"roles": ["maintainer"]}}}))
    [carol_token] = [t for t in engine.users.tokens() if t.name == "carol"]
    values = {
        "waiting": waiting, "proposal": hash_of(engine, waiting), "stale": stale, "other": other,
        "other_proposal": hash_of(engine, other), "halted": halted, "expired": expired,
        "expired_proposal": hash_of(engine, expired), "carol_id": carol_token.token_id, "dir": str(where),
        **{name: str(people.file(name)) for name in people.tokens},
    }
    yield World(backend, url, where, engine, people, values, gina)
    engine.close()


# (what is tried, arguments, extra environment, what the one line must say)
CLI_CASES: list[tuple[str, list[str], dict[str, str], str]] = [
    ("approve: no token", ["approve", "{waiting}", "--hash", "{proposal}"], {}, "needs your token"),
    ("approve: --as a maintainer's name, no token", ["approve", "{waiting}", "--as", "carol", "--hash", "{proposal}"],
     {}, "needs your token"),
    ("approve: a token file holding a password", ["approve", "{waiting}", "--hash", "{proposal}",
                                                 "--token-file", "{dir}/junk.token"], {},
     "does not hold a statewright token"),
    ("approve: a well-formed token never issued", ["approve", "{waiting}", "--hash", "{proposal}",
                                                  "--token-file", "{dir}/unknown.token"], {}, "unknown or revoked"),
    ("approve: a revoked token", ["approve", "{waiting}", "--hash", "{proposal}", "--token-file", "{dave}"], {},
     "unknown or revoked"),
    ("approve: a removed person's token", ["approve", "{waiting}", "--hash", "{proposal}", "--token-file", "{frank}"],
     {}, "unknown or revoked"),
    ("approve: own token, --as another person", ["approve", "{waiting}", "--as", "carol", "--hash", "{proposal}",
                                                "--token-file", "{erin}"], {}, "is not the token's person ('erin')"),
    ("approve: --as an agent identity", ["approve", "{waiting}", "--as", "agent:reviewer", "--hash", "{proposal}",
                                        "--token-file", "{carol}"], {}, "is not the token's person"),
    ("approve: the author of the work", ["approve", "{waiting}", "--hash", "{proposal}", "--token-file", "{bob}"], {},
     "separation of duty"),
    ("approve: a person without the step's role", ["approve", "{waiting}", "--hash", "{proposal}",
                                                  "--token-file", "{erin}"], {}, "lacks the role 'maintainer'"),
    ("approve: blind, no --hash and no terminal", ["approve", "{waiting}", "--token-file", "{carol}"], {},
     "approve needs --hash HASH"),
    ("approve: blind, --hash ''", ["approve", "{waiting}", "--hash", "", "--token-file", "{carol}"], {},
     "needs the hash of the proposal you reviewed"),
    ("approve: a stale hash (the earlier proposal)", ["approve", "{waiting}", "--hash", "{stale}",
                                                     "--token-file", "{carol}"], {}, "is not the current proposal"),
    ("approve: another task's proposal hash", ["approve", "{waiting}", "--hash", "{other_proposal}",
                                              "--token-file", "{carol}"], {}, "is not the current proposal"),
    ("approve: after the approval window closed", ["approve", "{expired}", "--hash", "{expired_proposal}",
                                                  "--token-file", "{carol}"], {}, "approval window closed"),
    ("approve: STATEWRIGHT_USERS names a users.json granting mallory",
     ["approve", "{waiting}", "--as", "mallory", "--hash", "{proposal}"],
     {"STATEWRIGHT_USERS": "{dir}/evil-users.json"}, "needs your token"),
    ("approve: STATEWRIGHT_TOKEN holds a name", ["approve", "{waiting}", "--hash", "{proposal}"],
     {"STATEWRIGHT_TOKEN": "carol"}, "does not hold a statewright token"),
    ("reject: no token", ["reject", "{waiting}", "--as", "carol", "--reason", "nope"], {}, "needs your token"),
    ("reject: a person without the step's role", ["reject", "{waiting}", "--reason", "nope", "--token-file", "{erin}"],
     {}, "lacks the role 'maintainer'"),
    ("reject: the author of the work", ["reject", "{waiting}", "--reason", "nope", "--token-file", "{bob}"], {},
     "separation of duty"),
    ("retry: a maintainer without the operator role", ["retry", "{halted}", "--reason", "x", "--token-file",
                                                      "{carol}"], {}, "lacks the role 'operator'"),
    ("retry: a revoked operator token", ["retry", "{halted}", "--reason", "x", "--token-file", "{dave}"], {},
     "unknown or revoked"),
    ("cancel: no token", ["cancel", "{halted}", "--as", "ops", "--reason", "x"], {}, "needs your token"),
    ("cancel: a maintainer without the operator role", ["cancel", "{waiting}", "--reason", "x", "--token-file",
                                                       "{carol}"], {}, "lacks the role 'operator'"),
    ("users add: no token", ["users", "add", "rubberstamp", "--role", "maintainer"], {}, "needs your token"),
    ("users add: a maintainer adds a rubber stamp", ["users", "add", "rubberstamp", "--role", "maintainer",
                                                    "--token-file", "{carol}"], {}, "lacks the role 'admin'"),
    ("users add: an author grants themself a role", ["users", "add", "erin", "--role", "maintainer",
                                                    "--token-file", "{erin}"], {}, "lacks the role 'admin'"),
    ("users add: with a revoked admin token", ["users", "add", "rubberstamp", "--role", "maintainer",
                                              "--token-file", "{exadmin}"], {}, "unknown or revoked"),
    ("users add: the author's name with a trailing newline", ["users", "add", "bob\n", "--role", "maintainer",
                                                             "--token-file", "{root}"], {}, "user name 'bob\\n' must"),
    ("users add: a case variant of the author's name", ["users", "add", "Bob", "--role", "maintainer",
                                                       "--token-file", "{root}"], {}, "only in case"),
    ("users add: an agent identity", ["users", "add", "agent:reviewer", "--role", "maintainer",
                                     "--token-file", "{root}"], {}, "names an agent"),
    ("users token: a maintainer issues a token for the author", ["users", "token", "bob", "--token-file", "{carol}"],
     {}, "lacks the role 'admin'"),
    ("users revoke-token: an author revokes a maintainer's token", ["users", "revoke-token", "{carol_id}",
                                                                   "--token-file", "{erin}"], {},
     "lacks the role 'admin'"),
    ("users remove: a maintainer removes the admin", ["users", "remove", "root", "--token-file", "{carol}"], {},
     "lacks the role 'admin'"),
    ("users drop-role: a maintainer drops the admin's role", ["users", "drop-role", "root", "--role", "admin",
                                                             "--token-file", "{carol}"], {}, "lacks the role 'admin'"),
    ("users bootstrap: while an admin exists", ["users", "bootstrap", "mallory"], {}, "an admin exists already"),
    ("users import: a users.json as a maintainer", ["users", "import", "{dir}/evil-users.json", "--token-file",
                                                   "{carol}"], {}, "lacks the role 'admin'"),
    ("users import: a users.json naming 'bob\\n'", ["users", "import", "{dir}/newline-users.json", "--token-file",
                                                   "{root}"], {}, "user name 'bob\\n' must"),
]


def _fill(text: str, world: World) -> str:
    for name, value in world.values.items():
        text = text.replace(f"{{{name}}}", value)
    return text


@pytest.mark.parametrize("case", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_a_bypass_through_the_cli_is_refused_and_changes_nothing(
    case: tuple[str, list[str], dict[str, str], str], world: World
) -> None:
    """One error line saying why; every task and people row as it was."""
    name, args, env, says = case
    before = snapshot(world.url)

    result = run_cli(*[_fill(a, world) for a in args], "--db", world.url,
                     env={k: _fill(v, world) for k, v in env.items()})

    after = snapshot(world.url)
    tally("bypass", name, backend=world.backend, refused=result.exit_code != 0 and after == before)
    assert says in one_error_line(result)
    assert after == before


def _forged(world: World, **fields: object) -> Callable[[], object]:
    def attempt() -> object:
        tid = world.values["waiting"]
        ev = ApprovalGranted(event_id=f"{tid}:approve:forged", at_ms=SystemClock().now_ms(), step="sign-off",
                             proposal_hash=world.values["proposal"], **fields)  # type: ignore[arg-type]
        return world.engine.apply(tid, ev)
    return attempt


def _api_cases(world: World) -> dict[str, tuple[Callable[[], object], type[StatewrightError], str]]:
    e, v, tokens = world.engine, world.values, world.people.tokens
    carol = e.users.authenticate(tokens["carol"])
    return {
        "engine.approve: a bare name": (
            lambda: e.approve(v["waiting"], "carol", proposal_hash=v["proposal"]),  # type: ignore[arg-type]
            AccessError, "not the name 'carol'"),
        "engine.approve: a forged Principal": (
            lambda: e.approve(v["waiting"], Principal("carol", ("maintainer",), "tk_forged", "swt_" + "B" * 43),
                              proposal_hash=v["proposal"]), AccessError, "unknown or revoked"),
        "engine.approve: a Principal whose token was revoked since": (
            lambda: e.approve(v["waiting"], world.gina, proposal_hash=v["proposal"]), AccessError,
            "unknown or revoked"),
        "engine.approve: proposal_hash=''": (
            lambda: e.approve(v["waiting"], carol, proposal_hash=""), InputError, "needs the hash"),
        "engine.approve: proposal_hash=None": (
            lambda: e.approve(v["waiting"], carol, proposal_hash=None),  # type: ignore[arg-type]
            InputError, "needs the hash"),
        "engine.approve: a stale hash": (
            lambda: e.approve(v["waiting"], carol, proposal_hash=v["stale"]), ApprovalError,
            "is not the current proposal"),
        "engine.apply: a forged approval by 'bob\\n'": (
            _forged(world, actor="bob\n", roles=("maintainer",)), ApprovalError, "user name 'bob\\n' must"),
        "engine.apply: a forged approval by an agent": (
            _forged(world, actor="agent:reviewer", roles=("maintainer",)), ApprovalError, "agent or system actor"),
        "engine.retry: a maintainer's Principal": (
            lambda: e.retry(v["halted"], carol, "x"), AccessError, "lacks the role 'operator'"),
        "engine.cancel: a bare name": (
            lambda: e.cancel(v["halted"], "ops", "x"), AccessError, "not the name 'ops'"),  # type: ignore[arg-type]
        "users.add: a maintainer's Principal": (
            lambda: e.users.add(carol, "rubberstamp", ["maintainer"]), AccessError, "lacks the role 'admin'"),
        "users.issue_token: a maintainer's Principal": (
            lambda: e.users.issue_token(carol, "bob"), AccessError, "lacks the role 'admin'"),
        "users.bootstrap: while an admin exists": (
            lambda: e.users.bootstrap("mallory"), AccessError, "an admin exists already"),
    }


API_CASES = [
    "engine.approve: a bare name", "engine.approve: a forged Principal",
    "engine.approve: a Principal whose token was revoked since", "engine.approve: proposal_hash=''",
    "engine.approve: proposal_hash=None", "engine.approve: a stale hash", "engine.apply: a forged approval by 'bob\\n'",
    "engine.apply: a forged approval by an agent", "engine.retry: a maintainer's Principal",
    "engine.cancel: a bare name", "users.add: a maintainer's Principal", "users.issue_token: a maintainer's Principal",
    "users.bootstrap: while an admin exists",
]


@pytest.mark.parametrize("name", API_CASES)
def test_a_bypass_through_the_python_api_is_refused_and_changes_nothing(name: str, world: World) -> None:
    """The same refusals from the Python API: a statewright error naming the reason, no row changed."""
    attempt, error, says = _api_cases(world)[name]
    before = snapshot(world.url)

    with pytest.raises(StatewrightError) as caught:
        attempt()

    after = snapshot(world.url)
    tally("bypass", name, backend=world.backend, refused=isinstance(caught.value, error) and after == before)
    assert isinstance(caught.value, error) and says in str(caught.value)
    assert after == before


def test_the_campaign_covers_at_least_thirty_attempts() -> None:
    """The report's figure needs 30 distinct attempts per backend; these two lists hold them."""
    names = [c[0] for c in CLI_CASES] + API_CASES
    assert len(set(names)) == len(names) >= 30
