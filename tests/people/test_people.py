"""People, roles and tokens in the store, on SQLite and PostgreSQL: the first admin, tokens
kept hashed and revocable, admin-only changes in an audited log that shows rows written
behind its back, the import of an old users.json, and approving at a terminal."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import statewright.cli
from statewright._errors import AuthenticationError, InputError, PermissionDeniedError
from statewright.runtime.engine import Engine
from statewright.store import open_store
from store.backends import SQL_BACKENDS, raw_sql
from tally import tally

from .support import People, duty, hash_of, one_error_line, run_cli, snapshot


@pytest.fixture
def engine(store_url: str, tmp_path: Path) -> Iterator[Engine]:
    e = Engine(open_store(store_url), workspace_root=tmp_path / "ws")
    yield e
    e.close()


def test_bootstrap_makes_the_first_admin_once(engine: Engine) -> None:
    """The token bootstrap issues names an admin; a second bootstrap is refused."""
    issued = engine.users.bootstrap("ada")
    who = engine.users.authenticate(issued.token)
    assert (who.name, who.roles, who.token_id) == ("ada", ("admin",), issued.token_id)
    with pytest.raises(PermissionDeniedError, match="an admin exists already"):
        engine.users.bootstrap("mallory")
    assert [(e.actor, e.action, e.subject) for e in engine.users.log()] == [
        ("system:bootstrap", "bootstrap", "ada"), ("system:bootstrap", "issue_token", "ada")]


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_token_is_stored_only_as_its_sha256(engine: Engine, store_url: str, tmp_path: Path) -> None:
    """No table holds the token's text; sw_tokens holds its sha256."""
    people = People(engine, tmp_path)
    people.add("alice", "maintainer")
    rows = json.dumps(snapshot(store_url), default=str)
    for token in people.tokens.values():
        assert token not in rows
        assert hashlib.sha256(token.encode()).hexdigest() in rows


def test_revoked_and_removed_tokens_stop_working(engine: Engine, tmp_path: Path) -> None:
    """A revoked token no longer authenticates; removing a person revokes all of theirs, and
    adding them again gives them no old token back."""
    people = People(engine, tmp_path)
    people.add("alice", "maintainer")
    second = engine.users.issue_token(people.admin, "alice")
    engine.users.revoke_token(people.admin, second.token_id)
    with pytest.raises(AuthenticationError, match="unknown or revoked"):
        engine.users.authenticate(second.token)
    assert engine.users.authenticate(people.tokens["alice"]).name == "alice"

    engine.users.remove(people.admin, "alice")
    with pytest.raises(AuthenticationError):
        engine.users.authenticate(people.tokens["alice"])
    engine.users.add(people.admin, "alice", ["maintainer"])
    with pytest.raises(AuthenticationError):
        engine.users.authenticate(people.tokens["alice"])
    with pytest.raises(InputError, match="already revoked"):
        engine.users.revoke_token(people.admin, second.token_id)


def test_the_last_admin_stays(engine: Engine, tmp_path: Path) -> None:
    """The only admin can neither be removed nor lose the role; with a second admin, they can."""
    people = People(engine, tmp_path)
    with pytest.raises(InputError, match="'root' is the last admin"):
        engine.users.remove(people.admin, "root")
    with pytest.raises(InputError, match="'root' is the last admin"):
        engine.users.drop_roles(people.admin, "root", ["admin"])
    people.add("ada", "admin")
    assert engine.users.drop_roles(people.admin, "root", ["admin"]).roles == ()


def test_the_cli_lists_people_and_audits_every_change(store_url: str, tmp_path: Path) -> None:
    """bootstrap, add, token, drop-role, remove, revoke: each a log row saying who did what;
    list shows roles and token ids, never a token; whoami names the token's person."""
    root = tmp_path / "root.token"
    assert run_cli("users", "bootstrap", "root", "--out", root, "--db", store_url).exit_code == 0
    assert root.stat().st_mode & 0o077 == 0
    as_root = ("--token-file", str(root), "--db", store_url)
    assert run_cli("users", "add", "alice", "--role", "maintainer", "--role", "editor", *as_root).stdout == (
        "alice: editor, maintainer\n")
    issued = run_cli("users", "token", "alice", *as_root)
    token = issued.stdout.strip()
    assert issued.exit_code == 0 and token.startswith("swt_") and "shown once" in issued.stderr
    assert run_cli("users", "drop-role", "alice", "--role", "editor", *as_root).stdout == "alice: maintainer\n"
    listed = run_cli("users", "list", "--db", store_url).stdout
    assert "alice: maintainer  tokens: tk_" in listed and token not in listed
    me = run_cli("users", "whoami", "--db", store_url, env={"STATEWRIGHT_TOKEN": token}).stdout
    assert me.startswith("alice: maintainer (token tk_")
    assert run_cli("users", "remove", "alice", *as_root).exit_code == 0

    audit = run_cli("users", "audit", "--json", "--db", store_url)
    assert audit.exit_code == 0
    changes = json.loads(audit.stdout)["changes"]
    assert [(c["actor"], c["action"], c["subject"], c["roles"]) for c in changes] == [
        ("system:bootstrap", "bootstrap", "root", ["admin"]),
        ("system:bootstrap", "issue_token", "root", []),
        ("root", "add", "alice", ["editor", "maintainer"]),
        ("root", "issue_token", "alice", []),
        ("root", "drop_roles", "alice", ["editor"]),
        ("root", "remove", "alice", []),
    ]
    assert all(c["at_ms"] > 0 for c in changes)
    assert run_cli("users", "audit", "--db", store_url).stdout.endswith(
        "6 changes; the log and the tables agree\n")


def test_an_old_users_file_is_imported_by_an_admin(store_url: str, tmp_path: Path) -> None:
    """users import adds the file's people and roles in one audited change; no tokens come with them."""
    old = tmp_path / "users.json"
    old.write_text(json.dumps({"users": {"alice": {"roles": ["maintainer"]}, "olga": {"roles": ["operator"]}}}))
    root = tmp_path / "root.token"
    run_cli("users", "bootstrap", "root", "--out", root, "--db", store_url)

    out = run_cli("users", "import", old, "--token-file", root, "--db", store_url)

    assert out.exit_code == 0 and out.stdout == "alice: maintainer\nolga: operator\n"
    assert "alice: maintainer\n" in run_cli("users", "list", "--db", store_url).stdout
    bad = tmp_path / "bad.json"
    bad.write_text('{"users": {"alice": {"roles": "maintainer"}}}')
    assert "expected {\"users\"" in one_error_line(run_cli("users", "import", bad, "--token-file", root,
                                                             "--db", store_url))


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_at_a_terminal_approve_shows_the_proposal_and_asks(
    engine: Engine, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --hash at a terminal: the proposal and its hash are shown; 'n' approves nothing,
    'y' approves the hash that was shown."""
    people = People(engine, tmp_path)
    bob, carol = people.add("bob", "author", "maintainer"), people.add("carol", "maintainer")
    del carol
    tid = engine.submit(duty(), {})
    engine.approve(tid, bob, proposal_hash=hash_of(engine, tid))
    shown = hash_of(engine, tid)
    monkeypatch.setattr(statewright.cli, "_stdin_is_tty", lambda: True)
    args = ("approve", tid, "--token-file", str(people.file("carol")), "--db", store_url)
    before = snapshot(store_url)

    declined = run_cli(*args, stdin="n\n")

    assert declined.exit_code == 1 and '"step": "propose"' in declined.stdout and shown in declined.stdout
    assert declined.stderr.strip() == "error: not approved: the proposal was not confirmed"
    assert snapshot(store_url) == before
    accepted = run_cli(*args, stdin="y\n")
    assert accepted.exit_code == 0 and f"approved by carol; task {tid} is completed" in accepted.stdout
    assert engine.state(tid).approvals[-1].proposal_hash == shown


def test_a_users_file_grants_nothing(engine: Engine, store_url: str, tmp_path: Path) -> None:
    """STATEWRIGHT_USERS naming a file that makes mallory an admin changes nothing."""
    evil = tmp_path / "users.json"
    evil.write_text(json.dumps({"users": {"mallory": {"roles": ["admin", "maintainer"]}}}))
    People(engine, tmp_path)
    env = {"STATEWRIGHT_USERS": str(evil)}
    line = one_error_line(run_cli("users", "add", "mallory", "--role", "admin", "--db", store_url, env=env))
    assert "needs your token" in line
    assert [p.name for p in engine.users.people()] == ["root"]


# --- rows written behind statewright's back ---------------------------------------------

TAMPER = {
    "people: a person inserted into sw_users": (
        "INSERT INTO sw_users (name, roles, active, updated_at_ms) VALUES ('mallory', '[\"maintainer\"]', 1, 0)",
        "person 'mallory'"),
    "people: a role added to a person's row": (
        "UPDATE sw_users SET roles = '[\"admin\", \"maintainer\"]' WHERE name = 'alice'", "person 'alice'"),
    "people: a removed person made active again": (
        "UPDATE sw_users SET active = 1 WHERE name = 'frank'", "person 'frank'"),
    "people: a token inserted into sw_tokens": (
        "INSERT INTO sw_tokens (token_id, token_hash, name, issued_at_ms) VALUES ('tk_evil', 'ab', 'alice', 0)",
        "token 'tk_evil'"),
    "people: a revoked token made valid again": (
        "UPDATE sw_tokens SET revoked_at_ms = NULL WHERE name = 'frank'", "token 'tk_"),
    "people: a token's hash swapped for a known one": (
        "UPDATE sw_tokens SET token_hash = 'cd' WHERE name = 'alice'", "token 'tk_"),
    "people: a log row's actor column edited": (
        "UPDATE sw_user_log SET actor = 'alice' WHERE seq = 3", "people log row 3: column actor is 'alice'"),
    "people: a log row's body edited": (
        "UPDATE sw_user_log SET body = replace(body, 'maintainer', 'admin') WHERE seq = 3",
        "hash chain broken at people log row 3"),
    "people: a log row in the middle deleted": (
        "DELETE FROM sw_user_log WHERE seq = 3", "people log rows jump to 4 at position 3"),
}


@pytest.mark.parametrize("case", sorted(TAMPER))
@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_rows_written_behind_the_logs_back_are_found(
    case: str, backend: str, engine: Engine, store_url: str, tmp_path: Path
) -> None:
    """users audit replays the people log: each edit shows as a problem line and exit 1."""
    people = People(engine, tmp_path)
    people.add("alice", "maintainer")
    people.add("frank", "maintainer")
    engine.users.remove(people.admin, "frank")
    assert engine.users.problems() == []
    sql, says = TAMPER[case]

    raw_sql(store_url, sql)

    problems = engine.users.problems()
    tally("tamper", case, backend=backend, detected=bool(problems))
    assert any(says in p for p in problems), problems
    audit = run_cli("users", "audit", "--db", store_url)
    assert audit.exit_code == 1 and any(line.startswith("problem: ") for line in audit.stdout.splitlines())


def _plan(store_url: str, sql: str, params: tuple[str, ...] = ()) -> str:
    """How the database would run ``sql`` (PostgreSQL told to avoid a full scan where an
    index can serve, since its tables here are too small to choose one on cost)."""
    if not store_url.startswith("postgresql://"):
        return " ".join(str(row[-1]) for row in raw_sql(store_url, "EXPLAIN QUERY PLAN " + sql, params))
    import psycopg

    from statewright.store.postgres import split_url

    conninfo, schema = split_url(store_url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute("SET enable_seqscan TO off")
        plan = conn.execute("EXPLAIN " + sql.replace("%", "%%").replace("?", "%s"), params).fetchall()
    return " ".join(str(row[0]) for row in plan)


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_authentication_reads_the_people_log_by_index(engine: Engine, store_url: str, tmp_path: Path) -> None:
    """An authentication reads the log rows about one person and the first keyed link by
    index: its cost does not grow with the people log."""
    people = People(engine, tmp_path)
    people.add("alice", "maintainer")
    assert engine.users.authenticate(people.tokens["alice"]).name == "alice"
    about = _plan(store_url, "SELECT seq FROM sw_user_log WHERE subject = ? ORDER BY seq", ("alice",))
    keyed = _plan(store_url, "SELECT MIN(seq) FROM sw_user_log WHERE hash LIKE 'hmac:%'")
    assert "sw_user_log_by_subject" in about, about
    assert "sw_user_log_keyed" in keyed, keyed
