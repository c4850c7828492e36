"""Every command the loop runs (pass worker, check, goal oracle, command source) sees a minimal
environment plus what the loop file declares for it; secrets the runner holds or a command
leaks are found nowhere afterwards (database, CLI output, the runner's stderr); a worker that
tries to act as a person with what its environment gives it is refused.

The loop store is SQLite only, so these run on SQLite."""

from __future__ import annotations

import json
import os
import re
import secrets
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from statewright.loop.definition import load_loop, parse_loop
from statewright.loop.errors import LoopDefinitionError
from statewright.loop.runner import decide_gate
from statewright.loop.store import LoopStore
from statewright.machine.loop.model import LoopConfig, LoopStatus
from statewright.machine.loop.reducer import initial_state
from tally import tally

from .helpers import PY, SCRIPTS, FakeClock, clean_env, cli, command, person, run_loop, token_file, write_loop


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A SQLite file: these tests search the database file itself for planted secrets and
    compare paths with it (what a command sees does not depend on the backend)."""
    return tmp_path / "state" / "state.db"

S = LoopStatus
# What the runner holds that no command of the loop may see.
CONTROL_PLANE = ("STATEWRIGHT_DB", "STATEWRIGHT_TOKEN", "STATEWRIGHT_USERS", "PGPASSWORD", "OPENAI_API_KEY",
                 "AWS_SECRET_ACCESS_KEY", "PYTHONPATH")
# What any command gets unasked when the runner has it, and what a shell adds by itself.
BASE = {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TZ", "PWD"}
ROLES = ("source", "worker", "check", "oracle")
# What each command is told by the loop, besides what it declares.
TOLD = {
    "source": {"STATEWRIGHT_LOOP", "STATEWRIGHT_RUN_ID"},
    "worker": {"STATEWRIGHT_RUN_ID", "STATEWRIGHT_ITEM_ID", "STATEWRIGHT_ITEM", "STATEWRIGHT_ATTEMPT",
               "STATEWRIGHT_BRIEF", "STATEWRIGHT_IDEMPOTENCY_KEY", "STATEWRIGHT_RESULT_FILE"},
    "check": {"STATEWRIGHT_LOOP", "STATEWRIGHT_RUN_ID", "STATEWRIGHT_ITEM_ID", "STATEWRIGHT_ITEM",
              "STATEWRIGHT_ATTEMPT"},
    "oracle": {"STATEWRIGHT_LOOP", "STATEWRIGHT_RUN_ID"},
}


def _secret(label: str) -> str:
    return f"{label}-{secrets.token_hex(8)}"


def _planted(db: Path) -> dict[str, str]:
    """The runner's environment: its control plane, and each command's secret."""
    env = {
        "STATEWRIGHT_DB": str(db),
        "STATEWRIGHT_TOKEN": _secret("admin-token"),
        "STATEWRIGHT_USERS": str(db.parent / "users.json"),
        "PGPASSWORD": _secret("pgpw"),
        "OPENAI_API_KEY": _secret("sk"),
        "AWS_SECRET_ACCESS_KEY": _secret("aws"),
        "PYTHONPATH": str(db.parent / "lib"),
    }
    env.update({f"{role.upper()}_TOKEN": _secret(role) for role in ROLES})
    return env


def _leaky_loop(root: Path) -> Path:
    """A loop whose every command is scripts/leaky.py, each declaring its own secret."""
    dumps = root / "dumps"
    dumps.mkdir(parents=True)

    def cmd(role: str) -> dict[str, Any]:
        return {"command": [PY, str(SCRIPTS / "leaky.py"), role], "timeout": "60s",
                "env": {"ENV_DUMP": str(dumps)}, "secrets": [f"{role.upper()}_TOKEN"]}

    return write_loop(
        root, [], loop="leaky", source=cmd("source"), workflow=cmd("worker"),
        check=[{"name": "suite", **cmd("check")}],
        goal={"all_items_closed": True, "oracles": [{"name": "tests", **cmd("oracle")}]},
        budgets={"passes": 5},
    )


def _dump(root: Path, role: str) -> dict[str, str]:
    value = json.loads((root / "dumps" / f"{role}.json").read_text(encoding="utf-8"))
    assert isinstance(value, dict)
    return value


def test_each_loop_command_sees_only_the_minimal_environment(tmp_path: Path, db: Path) -> None:
    """The pass worker, the check, the goal oracle and the command source each see the base
    variables, a private HOME and TMPDIR, what the loop tells it and what it declares; none
    of the runner's database, token, users file, PGPASSWORD, API keys or PYTHONPATH, and
    no other command's secret."""
    root = tmp_path / "l"
    planted = _planted(db)
    outcome = run_loop(_leaky_loop(root), db, env={**clean_env(), **planted})
    assert outcome.status is S.DONE, outcome
    for role in ROLES:
        seen = _dump(root, role)
        assert set(seen) - BASE == TOLD[role] | {"ENV_DUMP", f"{role.upper()}_TOKEN"}, role
        assert seen[f"{role.upper()}_TOKEN"] == planted[f"{role.upper()}_TOKEN"]
        for name in CONTROL_PLANE:
            assert name not in seen, f"{role} sees {name}"
        assert seen["HOME"] != os.environ.get("HOME") and not Path(seen["HOME"]).exists(), role
    assert Path(_dump(root, "worker")["STATEWRIGHT_RESULT_FILE"]).parent != db.parent


def _database_text(db: Path) -> str:
    """Every byte of the SQLite files (rows that linger in free pages included)."""
    files = [Path(f"{db}{suffix}") for suffix in ("", "-wal", "-shm", "-journal")]
    return "".join(f.read_bytes().decode("latin-1") for f in files if f.exists())


# case -> the planted variable it leaks
CASES = {
    "loop worker: declared secret in note, stderr, artifacts, receipts": "WORKER_TOKEN",
    "loop worker reads the runner's token from /proc": "STATEWRIGHT_TOKEN",
    "loop worker reads the runner's PGPASSWORD from /proc": "PGPASSWORD",
    "loop worker reads the runner's API key from /proc": "OPENAI_API_KEY",
    "loop check fails printing its secret (into the next brief)": "CHECK_TOKEN",
    "loop goal oracle prints its secret": "ORACLE_TOKEN",
    "loop command source lists an item holding its secret": "SOURCE_TOKEN",
}


def test_planted_secrets_are_found_nowhere_after_a_loop_run(tmp_path: Path, db: Path) -> None:
    """A real 'loop run' process whose commands leak every secret they can (their declared
    ones, and the runner's own read from /proc): each value is then searched for in the
    database, in what 'loop run', 'loop show' and 'loop status' print, and in the runner's
    stderr: found 0 everywhere, and each leak is seen redacted where it was stored."""
    root = tmp_path / "l"
    planted = _planted(db)
    _leaky_loop(root)
    ran = cli(root, db, "run", "loop.yaml", extra_env=planted)
    assert ran.returncode == 0, ran.stderr
    shown = [cli(root, db, *args) for args in (("show", "1"), ("show", "1", "--json"),
                                               ("status",), ("status", "--json"))]
    assert all(done.returncode == 0 for done in shown), [d.stderr for d in shown]
    places = {
        "db": _database_text(db),
        "output": ran.stdout + "".join(done.stdout + done.stderr for done in shown),
        "logs": ran.stderr,
    }
    record = json.loads(shown[1].stdout)
    assert record["status"] == "done"
    last = {line["event_type"]: json.dumps(line) for line in record["lines"]}
    stored = {  # where each leak lands in the record, redacted
        "WORKER_TOKEN": last["WorkerReturned"],
        "STATEWRIGHT_TOKEN": last["WorkerReturned"],
        "PGPASSWORD": last["WorkerReturned"],
        "OPENAI_API_KEY": last["WorkerReturned"],
        "CHECK_TOKEN": last["BriefReady"],
        "ORACLE_TOKEN": last["GoalEvaluated"],
        "SOURCE_TOKEN": last["BriefReady"],
    }
    assert "patch-[redacted].diff" in last["WorkerReturned"]
    for name in ("STATEWRIGHT_TOKEN", "PGPASSWORD", "OPENAI_API_KEY"):
        assert f"{name}=[redacted]" in last["WorkerReturned"], f"{name}: the worker never read it"
    for case, name in CASES.items():
        assert "[redacted]" in stored[name], f"{case}: the leak never happened"
        for where, text in places.items():
            found = text.count(planted[name])
            tally("secrets", case, where=where, found=found)
            assert found == 0, f"{case}: {name} found {found}x in {where}"


def test_the_database_search_sees_what_is_written(tmp_path: Path) -> None:
    """The search is not blind: a value the loop store writes is found in its files."""
    db = tmp_path / "probe.db"
    config = LoopConfig(loop="needle-9b2e", check_names=("c",), oracle_names=("o",), max_passes=1)
    with LoopStore.open(db) as store:
        store.create_run(loop=config.loop, definition_path="l.yaml", definition_sha256="0" * 64,
                         make_state=lambda run_id, ledger: initial_state(run_id, config, ledger), assets={}, at_ms=1)
    assert _database_text(db).count("needle-9b2e") >= 1  # the row, and its key in the index


def _tries(root: Path) -> list[dict[str, Any]]:
    log = root / "tries.log"
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def test_a_loop_worker_cannot_act_as_a_person(tmp_path: Path, db: Path) -> None:
    """A run waits at its gate; another loop's worker, run by a runner holding the admin's
    token and the database, tries to add a maintainer, to bootstrap one, and to approve the
    waiting run, with its own environment and with the database's path it was told: every
    try fails, no one is added and the approval is still pending. The runner's environment
    would have let it (the same 'users add' succeeds with it)."""
    gated = write_loop(tmp_path / "gated", [{"id": "1"}], loop="gated", gate={"role": "maintainer"})
    assert run_loop(gated, db).paused is not None
    with LoopStore.open(db) as store:
        (pending,) = store.pending_approvals("1")
    admin = token_file(db, "ann", "maintainer").parent / "root.token"  # the database's admin
    sw = str(Path(PY).parent / "statewright")
    add = [sw, "users", "add", "rubberstamp", "--role", "maintainer"]
    tries = {
        "loop worker: users add with its environment": add,
        "loop worker: users add --db, no token": [*add, "--db", "$LOOP_DB"],
        "loop worker: users bootstrap --db (an admin exists)": [sw, "users", "bootstrap", "rubberstamp",
                                                                "--db", "$LOOP_DB"],
        "loop worker: loop approve --db, no token": [
            PY, "-m", "statewright.loop", "approve", "1", "--as", "rubberstamp", "--role", "maintainer",
            "--hash", pending.proposal_hash, "--db", "$LOOP_DB"],
    }
    hostile = write_loop(
        tmp_path / "hostile", [{"id": "h", "try": list(tries.values())}], loop="hostile",
        workflow={"command": command("tries.py"), "timeout": "60s", "env": {"LOOP_DB": str(db)}},
        attempts_per_item=1,
    )
    runner_env = {**clean_env(), "STATEWRIGHT_DB": str(db), "STATEWRIGHT_TOKEN": admin.read_text().strip()}
    run_loop(hostile, db, env=runner_env)
    results = _tries(tmp_path / "hostile")
    assert [r["argv"][-1] for r in results][1:] == [str(db)] * 3  # it was told where the database is
    with sqlite3.connect(db) as conn:
        names = {row[0] for row in conn.execute("SELECT name FROM sw_users")}
    conn.close()
    with LoopStore.open(db) as store:
        still = [a.proposal_hash for a in store.pending_approvals("1")]
    for (case, _argv), result in zip(tries.items(), results, strict=True):
        refused = result["status"] != 0 and "rubberstamp" not in names and still == [pending.proposal_hash]
        tally("bypass", case, backend="sqlite", refused=refused)
        assert refused, f"{case}: {result}"
    control = subprocess.run(add, env=runner_env, capture_output=True, text=True, check=False)
    assert control.returncode == 0, f"the runner's environment would have let it: {control.stderr}"


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"workflow": {"command": ["w"], "env": {"STATEWRIGHT_DB": "x"}}},
         "workflow: env: 'STATEWRIGHT_DB' is reserved"),
        ({"workflow": {"command": ["w"], "secrets": ["STATEWRIGHT_TOKEN"]}},
         "workflow: secrets: 'STATEWRIGHT_TOKEN' is reserved"),
        ({"workflow": {"command": ["w"], "env": {"lower": "x"}}}, "is not a variable name"),
        ({"workflow": {"command": ["w"], "env": {"N": 3}}}, "env N: the value must be text"),
        ({"workflow": {"command": ["w"], "env": ["N"]}}, "'env' must map variable names"),
        ({"workflow": {"command": ["w"], "secrets": "GH_TOKEN"}}, "'secrets' must be a list"),
        ({"workflow": {"command": ["w"], "env": {"K": "v"}, "secrets": ["K"]}}, "both in env and in secrets"),
        ({"check": [{"command": ["c"], "secrets": ["A", "A"]}]}, "check[0]: secrets: A is listed twice"),
        ({"goal": {"oracles": [{"command": ["o"], "env": {"STATEWRIGHT_X": "1"}}]}},
         "goal.oracles[0]: env: 'STATEWRIGHT_X' is reserved"),
        ({"source": {"command": ["s"], "env": {"1A": "x"}}}, "source: env: '1A' is not a variable name"),
        ({"source": {"jsonl": "b.jsonl", "secrets": ["GH_TOKEN"]}}, "source.secrets: only a command source"),
    ],
)
def test_bad_declarations_are_refused_at_load(tmp_path: Path, fields: dict[str, Any], says: str) -> None:
    """env and secrets of loop commands are checked as a step's are, naming the field."""
    path = write_loop(tmp_path / "l", [{"id": "1"}], **fields)
    with pytest.raises(LoopDefinitionError) as caught:
        load_loop(path)
    assert says in str(caught.value)


def test_declarations_reach_the_definition(tmp_path: Path) -> None:
    """Declared env and secrets are kept per command."""
    worker = {"command": ["w"], "env": {"REGION": "eu-west-1"}, "secrets": ["GH_TOKEN"]}
    path = write_loop(tmp_path / "l", [{"id": "1"}], workflow=worker,
                      source={"command": ["s"], "secrets": ["GH_TOKEN"]})
    d = load_loop(path)
    assert d.worker.command is not None and d.source.command is not None
    assert dict(d.worker.command.env) == {"REGION": "eu-west-1"} and d.worker.command.secrets == ("GH_TOKEN",)
    assert d.source.command.secrets == ("GH_TOKEN",)


def test_a_declared_secret_the_runner_lacks_refuses_the_run(tmp_path: Path, db: Path) -> None:
    """One line naming the command and the variable, exit 2, and no database written."""
    worker = {"command": command("worker.py"), "secrets": ["DEPLOY_TOKEN"]}
    write_loop(tmp_path / "l", [{"id": "1"}], workflow=worker)
    done = cli(tmp_path / "l", db, "run", "loop.yaml")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "workflow declares secret DEPLOY_TOKEN, which this process's environment lacks" in done.stderr
    assert not db.exists()


def test_an_approval_binds_when_a_secret_is_part_of_its_fingerprint(tmp_path: Path, db: Path) -> None:
    """Redaction never rewrites the proposal_hash an approval binds to: with a runner secret
    that happens to be a piece of it, the approved run still carries on to DONE."""
    clock = FakeClock()
    path = write_loop(tmp_path / "l", [{"id": "x"}], gate={"role": "maintainer"})
    paused = run_loop(path, db, clock)
    with LoopStore.open(db) as store:
        (pending,) = store.pending_approvals(paused.run_id)
        decide_gate(store, paused.run_id, by=person(store.store, "ann", "maintainer"),
                    proposal_hash=pending.proposal_hash, approve=True, at_ms=clock())
    piece = next(pending.proposal_hash[i:i + 12] for i in range(0, 52)
                 if not pending.proposal_hash[i:i + 12].isdigit())
    done = run_loop(path, db, clock, env={**clean_env(), "DEPLOY_TOKEN": piece})
    assert done.status is S.DONE, done


def test_the_readme_loop_snippet_loads() -> None:
    """The README's declarations for loop commands are a valid part of a loop file."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### What the outer loop's commands see"):]
    snippet = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert snippet is not None
    data = yaml.safe_load(snippet.group(1))
    data |= {"loop": "readme", "goal": {"oracles": [{"command": ["true"]}]}, "budgets": {"passes": 1}}
    d = parse_loop(data)
    assert d.source.command is not None and d.source.command.secrets == ("GH_TOKEN",)
    assert d.source.command.argv[-1] == "number,title"
