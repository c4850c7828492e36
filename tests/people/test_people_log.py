"""The people log under attack, on SQLite and PostgreSQL, unkeyed and keyed: grants written
behind statewright's back (a person, a role, a token; alone, or with a log row recomputed as
someone with write access can) are found by ``statewright verify`` (one ``people:`` line per
finding, exit 1) and refused by authentication, as far as each kind of chain can prove.
Each case is tallied (category ``tamper``) next to the assertion on verify's exit.

Cases with ``detected=False`` are the documented limits: an unkeyed log recomputed after a
forged change, and a cut-off last change with the tables rolled back to match."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from statewright._canonical import canonical_json
from statewright._errors import AuthenticationError, PermissionDeniedError
from statewright.machine.state import TaskStatus
from statewright.runtime.engine import Engine
from statewright.runtime.run import run_task
from statewright.store import open_store
from statewright.store.chain import KEY_ENV, Chain, key_id, legacy_link, link_format
from store.backends import SQL_BACKENDS, raw_sql
from tally import tally

from .support import People, gate, hash_of, run_cli

KEY = "people-log-key-" + "k" * 24
FORGED = "swt_" + "F" * 43  # a token the attacker made up and knows
FORGED_HASH = hashlib.sha256(FORGED.encode()).hexdigest()
Link = Callable[[int, int, str, str, str, str, str], str]


@dataclass
class World:
    url: str
    engine: Engine
    tokens: dict[str, str]  # name -> token text ("alice2": alice's revoked one)
    ids: dict[str, str]  # the same names -> token id


def build(url: str, keyed: bool, monkeypatch: pytest.MonkeyPatch) -> World:
    """root (admin), alice (maintainer, one token active, one revoked), frank (removed last)."""
    if keyed:
        monkeypatch.setenv(KEY_ENV, KEY)
    else:
        monkeypatch.delenv(KEY_ENV, raising=False)
    engine = Engine(open_store(url))
    people = People(engine)
    people.add("alice", "maintainer")
    people.add("frank", "maintainer")
    second = engine.users.issue_token(people.admin, "alice")
    engine.users.revoke_token(people.admin, second.token_id)
    engine.users.remove(people.admin, "frank")
    tokens = {**people.tokens, "alice2": second.token}
    ids = {name: engine.users.authenticate(t).token_id for name, t in people.tokens.items() if name != "frank"}
    ids["alice2"] = second.token_id
    return World(url, engine, tokens, ids)


def append_row(w: World, link: Link, action: str, subject: str, roles: tuple[str, ...] = (),
               token_id: str = "", token_hash: str = "") -> None:
    """A log row as statewright writes it, linked by ``link`` and inserted behind its back."""
    seq, prev, at_ms = raw_sql(w.url, "SELECT seq, hash, at_ms FROM sw_user_log ORDER BY seq DESC LIMIT 1")[0]
    seq, at_ms = int(seq) + 1, int(at_ms) + 1
    body = canonical_json({"seq": seq, "at_ms": at_ms, "actor": "root", "action": action, "subject": subject,
                           "roles": list(roles), "token_id": token_id, "token_hash": token_hash})
    h = link(seq, at_ms, "root", action, subject, prev, body)
    raw_sql(w.url, "INSERT INTO sw_user_log (seq, at_ms, actor, action, subject, body, prev_hash, hash)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (seq, at_ms, "root", action, subject, body, prev, h))


def relink(w: World, link: Link, only: int | None = None) -> None:
    """Recompute the log's links with ``link``: all of them, or (``only``) that one row's."""
    prev = "0" * 64
    for seq, at_ms, actor, action, subject, body, _prev, h in raw_sql(
            w.url, "SELECT seq, at_ms, actor, action, subject, body, prev_hash, hash FROM sw_user_log ORDER BY seq"):
        if only is None or seq == only:
            h = link(seq, at_ms, actor, action, subject, prev, body)
            raw_sql(w.url, "UPDATE sw_user_log SET prev_hash = ?, hash = ? WHERE seq = ?", (prev, h, seq))
        prev = h


UNKEYED: Link = Chain().people_link
GUESSED: Link = Chain(b"a-key-the-attacker-guessed").people_link


def _legacy(seq: int, at_ms: int, actor: str, action: str, subject: str, prev: str, body: str) -> str:
    return legacy_link(prev, seq, body)


LEGACY: Link = _legacy


def sql(statement: str, *params: str) -> Callable[[World], None]:
    """One statement; a param naming a token (``@alice``) stands for that token's id."""
    def edit(w: World) -> None:
        raw_sql(w.url, statement, [w.ids[p[1:]] if p.startswith("@") else p for p in params])
    return edit


def both(*edits: Callable[[World], None]) -> Callable[[World], None]:
    def edit(w: World) -> None:
        for e in edits:
            e(w)
    return edit


ALICE_ADMIN = sql("UPDATE sw_users SET roles = '[\"admin\", \"maintainer\"]' WHERE name = 'alice'")
ROOT_TOKEN = sql("INSERT INTO sw_tokens (token_id, token_hash, name, issued_at_ms) VALUES ('tk_evil', ?, 'root', 1)",
                 FORGED_HASH)


def admin_row(link: Link) -> Callable[[World], None]:
    return lambda w: append_row(w, link, "add", "alice", ("admin",))


def grant_in_place(w: World) -> None:
    """alice's own 'add' row made to say admin too (the table to match)."""
    ALICE_ADMIN(w)
    raw_sql(w.url, "UPDATE sw_user_log SET body = replace(body, '[\"maintainer\"]', '[\"admin\",\"maintainer\"]')"
            " WHERE seq = 3")


@dataclass(frozen=True)
class Case:
    name: str
    edit: Callable[[World], None]
    expect: str  # part of a people: finding ("" when nothing is found)
    token: str = ""  # whose token then tries to authenticate ("FORGED": the attacker's)
    refused: tuple[bool, bool] = (True, True)  # is that token refused: (unkeyed, keyed)
    detected: tuple[bool, bool] = (True, True)  # does verify find it: (unkeyed, keyed)
    keyed_only: bool = False


CASES = [
    Case("a person inserted into sw_users", sql(
        "INSERT INTO sw_users (name, roles, active, updated_at_ms) VALUES ('mallory', '[\"admin\"]', 1, 0)"),
        "person 'mallory': the table says roles [admin], the people log no such person"),
    Case("a role added to a person's row", ALICE_ADMIN, "person 'alice'", token="alice"),
    Case("a removed person and their token restored", both(
        sql("UPDATE sw_users SET active = 1 WHERE name = 'frank'"),
        sql("UPDATE sw_tokens SET revoked_at_ms = NULL WHERE name = 'frank'")), "person 'frank'", token="frank"),
    Case("a token inserted for an admin", ROOT_TOKEN, "token 'tk_evil'", token="FORGED"),
    Case("a revoked token made valid again", sql("UPDATE sw_tokens SET revoked_at_ms = NULL WHERE token_id = ?",
                                                 "@alice2"), "token 'tk_", token="alice2"),
    Case("a token's hash swapped for a known one", sql("UPDATE sw_tokens SET token_hash = ? WHERE token_id = ?",
                                                       FORGED_HASH, "@alice"), "token 'tk_", token="FORGED"),
    Case("a person's token moved to an admin", sql("UPDATE sw_tokens SET name = 'root' WHERE token_id = ?", "@alice"),
         "token 'tk_", token="alice"),
    Case("a role granted with a recomputed log row", both(ALICE_ADMIN, admin_row(UNKEYED)),
         "an unkeyed link follows keyed ones", token="alice", refused=(False, True), detected=(False, True)),
    Case("an admin's token issued with a recomputed log row", both(ROOT_TOKEN, lambda w: append_row(
        w, UNKEYED, "issue_token", "root", token_id="tk_evil", token_hash=FORGED_HASH)),
        "an unkeyed link follows keyed ones", token="FORGED", refused=(False, True), detected=(False, True)),
    Case("an admin added with recomputed log rows", both(
        sql("INSERT INTO sw_users (name, roles, active, updated_at_ms) VALUES ('mallory', '[\"admin\"]', 1, 0)"),
        sql("INSERT INTO sw_tokens (token_id, token_hash, name, issued_at_ms) VALUES ('tk_evil', ?, 'mallory', 1)",
            FORGED_HASH),
        lambda w: append_row(w, UNKEYED, "add", "mallory", ("admin",)),
        lambda w: append_row(w, UNKEYED, "issue_token", "mallory", token_id="tk_evil", token_hash=FORGED_HASH)),
        "an unkeyed link follows keyed ones", token="FORGED", refused=(False, True), detected=(False, True)),
    Case("a role granted and the whole log recomputed", both(grant_in_place, lambda w: relink(w, UNKEYED)),
         "the chain is not keyed (its last link is sha256)", token="alice", refused=(False, True),
         detected=(False, True)),
    Case("a role granted in a log row relinked alone", both(grant_in_place, lambda w: relink(w, UNKEYED, only=3)),
         "hash chain broken at people log row", token="alice", refused=(False, True)),
    Case("a role granted with a legacy-format log row", both(ALICE_ADMIN, admin_row(LEGACY)),
         "an unkeyed link follows keyed ones", token="alice", refused=(False, True), detected=(False, True)),
    Case("a role granted with a log row under a guessed key", both(ALICE_ADMIN, admin_row(GUESSED)),
         "keyed with key id", token="alice", keyed_only=True),
    Case("a log row's actor column edited", sql("UPDATE sw_user_log SET actor = 'alice' WHERE seq = 3"),
         "people log row 3: column actor is 'alice' but the body says 'root'"),
    Case("a log row in the middle deleted", sql("DELETE FROM sw_user_log WHERE seq = 3"),
         "people log rows jump to 4 at position 3"),
    Case("a log row's body made a JSON array", sql("UPDATE sw_user_log SET body = '[]' WHERE seq = 4"),
         "people log row 4: the body is not a people change"),
    Case("the admin deleted from sw_users", sql("DELETE FROM sw_users WHERE name = 'root'"), "person 'root'"),
    Case("the last change cut off and the tables rolled back to match", both(
        sql("DELETE FROM sw_user_log WHERE seq = 9"),
        sql("UPDATE sw_users SET active = 1 WHERE name = 'frank'"),
        sql("UPDATE sw_tokens SET revoked_at_ms = NULL WHERE name = 'frank'")),
        "", token="frank", refused=(False, False), detected=(False, False)),
]


def modes() -> Iterator[object]:
    for c in CASES:
        for keyed in (False, True):
            if keyed or not c.keyed_only:
                mode = "keyed" if keyed else "unkeyed"
                yield pytest.param(c, keyed, id=f"{mode}-{c.name}")


@pytest.mark.parametrize(("case", "keyed"), list(modes()))
@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_forged_grant_is_found_by_verify_and_refused(
    case: Case, keyed: bool, backend: str, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify exits 1 with one people: line per finding; the forged grant's token is refused."""
    w = build(store_url, keyed, monkeypatch)
    try:
        assert run_cli("verify", "--db", store_url).exit_code == 0

        case.edit(w)
        result = run_cli("verify", "--db", store_url)

        *findings, summary = result.stdout.splitlines()
        detected = result.exit_code == 1 and bool(findings)
        tally("tamper", f"people log: {case.name}{', keyed' if keyed else ''}", backend=backend, detected=detected)
        assert detected == case.detected[keyed], result.stdout
        assert result.stderr == "" and "Traceback" not in result.stdout
        assert all(line.startswith("people: ") for line in findings), findings
        if detected:
            assert any(case.expect in line for line in findings), findings
            assert summary.startswith("verified 0 tasks: 0 differ; the people log (") and summary.endswith(
                f"changes): {len(findings)} problems")
            assert run_cli("users", "audit", "--db", store_url).exit_code == 1
        if case.token:
            token = FORGED if case.token == "FORGED" else w.tokens[case.token]
            try:
                w.engine.users.authenticate(token)
                refused = False
            except AuthenticationError as exc:
                refused = True
                assert "\n" not in str(exc)
            assert refused == case.refused[keyed]
    finally:
        w.engine.close()


def test_the_campaign_tries_each_forged_grant_on_both_chains() -> None:
    """Every case but the guessed key (which needs a key) runs unkeyed and keyed."""
    assert len(list(modes())) == 2 * len(CASES) - 1 >= 35


# --- the worker's re-check before approved work runs ---------------------------------------

def restore_in_table(w: World) -> None:
    raw_sql(w.url, "UPDATE sw_users SET roles = '[\"maintainer\"]' WHERE name = 'carol'")


def restore_with_a_row(w: World) -> None:
    restore_in_table(w)
    append_row(w, UNKEYED, "add", "carol", ("maintainer",))


RESTORES = {
    "the approved step, after the approver's dropped role was written back into the table":
        (restore_in_table, False),
    "the approved step, after the approver's dropped role was written back with a recomputed log row, keyed":
        (restore_with_a_row, True),
}


@pytest.mark.parametrize("case", sorted(RESTORES))
@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_the_approved_step_does_not_run_on_a_role_the_log_took_away(
    case: str, backend: str, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """carol approves, an admin takes her role, someone with write access gives it back
    behind the log's back: the worker does not ship; the task halts with approval_revoked."""
    restore, keyed = RESTORES[case]
    w = build(store_url, keyed, monkeypatch)
    w.engine.close()
    engine = Engine(open_store(store_url), workspace_root=tmp_path / "ws")
    try:
        root = engine.users.authenticate(w.tokens["root"])
        engine.users.add(root, "carol", ["maintainer"])
        carol = engine.users.authenticate(engine.users.issue_token(root, "carol").token)
        effect = tmp_path / "shipped"
        tid = engine.submit(gate(effect), {"workspace": str(tmp_path)})
        assert run_task(engine, tid).status == "awaiting_approval"
        engine.approve(tid, carol, proposal_hash=hash_of(engine, tid))
        engine.users.drop_roles(root, "carol", ["maintainer"])
        restore(World(store_url, engine, w.tokens, w.ids))

        st = run_task(engine, tid)

        halt = st.halt
        refused = not effect.exists() and halt is not None and halt.reason == "approval_revoked"
        tally("bypass", case, backend=backend, refused=refused)
        assert not effect.exists()
        assert halt is not None and (st.status, halt.step, halt.reason) == (
            TaskStatus.HALTED, "approve", "approval_revoked")
        assert "'carol', who approved 'approve'" in halt.detail and "people log" in halt.detail
    finally:
        engine.close()


# --- formats, keys and upgrades -------------------------------------------------------------

def formats(url: str) -> set[str]:
    return {link_format(str(h)).name for (h,) in raw_sql(url, "SELECT hash FROM sw_user_log")}


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_legacy_people_log_verifies_and_db_upgrade_keys_it(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log written before links covered every column verifies as written (its columns
    checked against its bodies); db upgrade rewrites it in the current format; with a key set,
    verify and authentication ask for an upgrade, and after it both pass and new changes go on
    the keyed chain."""
    w = build(store_url, False, monkeypatch)
    w.engine.close()
    relink(w, LEGACY)
    assert formats(store_url) == {"legacy sha256"}
    assert run_cli("verify", "--db", store_url).exit_code == 0
    raw_sql(store_url, "UPDATE sw_user_log SET subject = 'root' WHERE seq = 3")
    edited = run_cli("verify", "--db", store_url)
    assert edited.exit_code == 1 and "people: people log row 3: column subject is 'root'" in edited.stdout
    raw_sql(store_url, "UPDATE sw_user_log SET subject = 'alice' WHERE seq = 3")

    upgraded = run_cli("db", "upgrade", "--db", store_url)
    assert upgraded.exit_code == 0, upgraded.output
    assert "the people log's chain rewritten in the current format (Chain(unkeyed))" in upgraded.stdout
    assert formats(store_url) == {"sha256"}

    monkeypatch.setenv(KEY_ENV, KEY)
    before = run_cli("verify", "--db", store_url)
    assert before.exit_code == 1
    assert "people: the chain is not keyed (its last link is sha256): anyone with write access" in before.stdout
    engine = Engine(open_store(store_url))
    try:
        with pytest.raises(AuthenticationError, match=f"not keyed by {KEY_ENV}.*'statewright db upgrade'"):
            engine.users.authenticate(w.tokens["alice"])
        assert run_cli("db", "upgrade", "--db", store_url).exit_code == 0
        assert formats(store_url) == {f"hmac (key id {key_id(KEY.encode())})"}
        root = engine.users.authenticate(w.tokens["root"])
        engine.users.add(root, "bob", ["author"])
    finally:
        engine.close()
    assert run_cli("verify", "--db", store_url).exit_code == 0


def test_a_keyed_people_log_cannot_be_checked_without_the_key(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the key verify says the log is keyed and fails, and nobody authenticates on
    rows that cannot be checked; with another key verify names both key ids."""
    w = build(store_url, True, monkeypatch)
    w.engine.close()
    monkeypatch.delenv(KEY_ENV)
    result = run_cli("verify", "--db", store_url)
    kid = key_id(KEY.encode())
    assert result.exit_code == 1
    assert f"people: the chain is keyed (key id {kid}); set {KEY_ENV} to check its links" in result.stdout
    engine = Engine(open_store(store_url))
    try:
        with pytest.raises(AuthenticationError, match=f"cannot be checked here: set {KEY_ENV} \\(key id {kid}\\)"):
            engine.users.authenticate(w.tokens["alice"])
    finally:
        engine.close()
    monkeypatch.setenv(KEY_ENV, "another-key-entirely")
    other = run_cli("verify", "--db", store_url)
    assert other.exit_code == 1
    assert f"keyed with key id {kid}, not the key given (key id {key_id(b'another-key-entirely')})" in other.stdout


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_db_upgrade_leaves_a_damaged_people_log_as_it_is(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An edited log is never re-linked (that would bless the edit): db upgrade names it and
    exits 1; verify keeps finding it."""
    w = build(store_url, False, monkeypatch)
    w.engine.close()
    raw_sql(store_url, "UPDATE sw_user_log SET body = replace(body, 'maintainer', 'admin') WHERE seq = 3")
    monkeypatch.setenv(KEY_ENV, KEY)
    upgraded = run_cli("db", "upgrade", "--db", store_url)
    assert upgraded.exit_code == 1
    assert "people: left as it is: hash chain broken at people log row 3" in upgraded.stderr
    assert formats(store_url) == {"sha256"}
    assert "people: hash chain broken at people log row 3" in run_cli("verify", "--db", store_url).stdout


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_bootstrap_is_refused_once_the_log_has_changes(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deleting every admin's row does not open the bootstrap again: the log is not empty."""
    w = build(store_url, True, monkeypatch)
    try:
        raw_sql(store_url, "DELETE FROM sw_users WHERE name = 'root'")
        with pytest.raises(PermissionDeniedError, match="an admin exists already"):
            w.engine.users.bootstrap("mallory")
        assert [p.name for p in w.engine.users.people()] == ["alice", "frank"]
    finally:
        w.engine.close()
