"""A step's process sees a minimal environment plus what the step declares; it cannot find
the control plane (no database URL, users file or token); a declared secret the worker lacks
fails the attempt, and bad declarations are refused when the definition loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from statewright._errors import DefinitionError
from statewright.definition import workflow_from_dict
from statewright.machine.state import TaskStatus
from statewright.runtime.engine import Engine
from statewright.runtime.worker import Worker

from .conftest import secret

# Variables of the worker a step must never see.
CONTROL_PLANE = ("STATEWRIGHT_DB", "DATABASE_URL", "STATEWRIGHT_USERS", "STATEWRIGHT_TOKEN", "PGPASSWORD",
                 "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "PYTHONPATH")
STEP_VARS = {"STATEWRIGHT_TASK_ID", "STATEWRIGHT_STEP", "STATEWRIGHT_ATTEMPT",
             "STATEWRIGHT_IDEMPOTENCY_KEY", "STATEWRIGHT_WORKSPACE", "STATEWRIGHT_DELIVERIES"}
AGENT_VARS = {"STATEWRIGHT_BRIEF", "STATEWRIGHT_VERDICT", "STATEWRIGHT_STATE"}
CODE_VARS = {"STATEWRIGHT_STATE", "STATEWRIGHT_OUTPUT"}
# What the worker passes on when it has them, and what a shell adds by itself.
BASE = {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TZ", "PWD"}


def _names(env_output: str) -> set[str]:
    return {line.split("=", 1)[0] for line in env_output.splitlines() if "=" in line}


def _plant_control_plane(monkeypatch: pytest.MonkeyPatch, store_url: str, tmp_path: Path) -> None:
    monkeypatch.setenv("STATEWRIGHT_DB", store_url)  # the real database: what an agent would use
    monkeypatch.setenv("DATABASE_URL", f"postgresql://sw:{secret('dbpw')}@db/sw")
    monkeypatch.setenv("STATEWRIGHT_USERS", str(tmp_path / "users.json"))
    monkeypatch.setenv("STATEWRIGHT_TOKEN", secret("token"))
    monkeypatch.setenv("PGPASSWORD", secret("pgpw"))
    monkeypatch.setenv("OPENAI_API_KEY", secret("sk"))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret("aws"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "lib"))


def test_steps_see_only_the_minimal_environment_and_what_they_declare(
    open_engine: Callable[..., Engine], store_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A code step and a command agent that run ``env`` see PATH, a private HOME and
    TMPDIR, the STATEWRIGHT_* step variables and their declared env and secrets; none of
    the worker's database URL, users file, token, PGPASSWORD or API keys."""
    _plant_control_plane(monkeypatch, store_url, tmp_path)
    deploy_token = secret("deploy")
    monkeypatch.setenv("DEPLOY_TOKEN", deploy_token)
    digest = [sys.executable, "-c", "import hashlib, os; "
              "print(hashlib.sha256(os.environ['DEPLOY_TOKEN'].encode()).hexdigest())"]
    wf = workflow_from_dict({"workflow": "env", "steps": [
        {"id": "print-env", "kind": "code", "owner": "t", "run": {"command": ["env"]},
         "env": {"REGION": "eu-west-1"}, "secrets": ["DEPLOY_TOKEN"]},
        {"id": "agent-env", "kind": "ai", "owner": "t", "agent": {"type": "command", "command": ["env"]}},
        {"id": "has-secret", "kind": "code", "owner": "t", "run": {"command": digest},
         "secrets": ["DEPLOY_TOKEN"]},
    ]})
    engine = open_engine()
    tid = engine.submit(wf, {})
    Worker(engine).run(until_idle=True)

    st = engine.state(tid)
    assert st.status is TaskStatus.COMPLETED, [(a.step, a.reason, a.detail) for a in st.attempts]
    code_env, agent_env, has_secret = st.attempts
    seen = _names(code_env.artifacts["stdout"])
    assert seen - BASE == STEP_VARS | CODE_VARS | {"REGION", "DEPLOY_TOKEN"}
    assert _names(agent_env.note) - BASE == STEP_VARS | AGENT_VARS
    for name in CONTROL_PLANE:
        assert name not in seen | _names(agent_env.note)
    assert "REGION=eu-west-1" in code_env.artifacts["stdout"]
    assert "DEPLOY_TOKEN=[redacted]" in code_env.artifacts["stdout"]  # declared, given, kept out
    import hashlib
    assert has_secret.output == hashlib.sha256(deploy_token.encode()).hexdigest()
    home = dict(line.split("=", 1) for line in code_env.artifacts["stdout"].splitlines() if "=" in line)["HOME"]
    assert home != os.environ.get("HOME") and not Path(home).exists()


def test_an_agent_cannot_find_the_control_plane(
    open_engine: Callable[..., Engine], store_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The agent of the report keeps its environment and, once its work waits for approval,
    adds a user and approves as it with the CLI. Run with exactly the environment and
    directory the agent had, the CLI cannot even find the task: the task still waits for a
    real approver and the users file is unchanged."""
    _plant_control_plane(monkeypatch, store_url, tmp_path)
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"alice": ["maintainer"]}))
    before = users.read_bytes()
    capture = tmp_path / "agent-env.json"
    keep = (f"{sys.executable} -c 'import json, os; "
            f"json.dump([dict(os.environ), os.getcwd()], open(os.environ[\"CAPTURE\"], \"w\"))'; "
            'echo "{\\"approved\\": true}" > "$STATEWRIGHT_VERDICT"')
    wf = workflow_from_dict({"workflow": "gate", "steps": [
        {"id": "implement", "kind": "ai", "owner": "t", "output_schema": "review",
         "agent": {"type": "command", "command": ["sh", "-c", keep]}, "env": {"CAPTURE": str(capture)}},
        {"id": "approve", "kind": "human", "owner": "leads", "approvers": {"role": "maintainer"}},
        {"id": "merge", "kind": "code", "owner": "t", "run": {"command": ["true"]}},
    ]})
    engine = open_engine()
    tid = engine.submit(wf, {})
    Worker(engine).run(until_idle=True)
    assert engine.state(tid).status is TaskStatus.AWAITING_APPROVAL

    agent_env, agent_cwd = json.loads(capture.read_text())

    def as_the_agent(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "statewright", *args], env=agent_env,
                              cwd=agent_cwd, capture_output=True, text=True, timeout=60)

    as_the_agent("users", "add", "rubberstamp", "--role", "maintainer")
    as_the_agent("approve", tid, "--as", "rubberstamp")
    looked = as_the_agent("show", tid)
    assert looked.returncode != 0 and "no statewright database here" in looked.stderr

    st = engine.state(tid)
    assert st.status is TaskStatus.AWAITING_APPROVAL
    assert [e.type for e in engine.events(tid)] == ["TaskSubmitted", "AttemptReported"]
    assert users.read_bytes() == before


def test_a_declared_secret_the_worker_lacks_fails_the_attempt(
    open_engine: Callable[..., Engine], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A missing secret is the attempt's failure (reason missing_credential, the name in the
    detail), routed like any other; the worker goes on with other work."""
    monkeypatch.delenv("NOT_EXPORTED_TOKEN", raising=False)
    wf = workflow_from_dict({"workflow": "needs", "steps": [
        {"id": "deploy", "kind": "code", "owner": "t", "run": {"command": ["true"]},
         "secrets": ["NOT_EXPORTED_TOKEN"]},
    ]})
    ok = workflow_from_dict({"workflow": "fine", "steps": [
        {"id": "build", "kind": "code", "owner": "t", "run": {"command": ["true"]}},
    ]})
    engine = open_engine()
    bad, good = engine.submit(wf, {}), engine.submit(ok, {})
    Worker(engine).run(until_idle=True)

    st = engine.state(bad)
    assert st.status is TaskStatus.HALTED
    [attempt] = st.attempts
    assert attempt.reason == "missing_credential"
    assert "NOT_EXPORTED_TOKEN" in attempt.detail
    assert engine.state(good).status is TaskStatus.COMPLETED


@pytest.mark.parametrize(("fields", "says"), [
    ({"env": {"lower": "x"}}, "'lower' is not a variable name"),
    ({"env": {"A-B": "x"}}, "'A-B' is not a variable name"),
    ({"env": {"PATH\n": "x"}}, "is not a variable name"),
    ({"env": {"1X": "x"}}, "'1X' is not a variable name"),
    ({"env": {"STATEWRIGHT_TASK_ID": "x"}}, "'STATEWRIGHT_TASK_ID' is reserved"),
    ({"secrets": ["STATEWRIGHT_DB"]}, "'STATEWRIGHT_DB' is reserved"),
    ({"env": {"PORT": 8080}}, "env PORT: the value must be text (quote it); got int"),
    ({"env": ["A=1"]}, "'env' must map variable names to text values; got list"),
    ({"secrets": "TOKEN"}, "'secrets' must be a list of variable names; got str"),
    ({"secrets": ["TOKEN", "TOKEN"]}, "secrets: TOKEN is listed twice"),
    ({"env": {"TOKEN": "x"}, "secrets": ["TOKEN"]}, "TOKEN is both in env and in secrets"),
])
def test_bad_declarations_are_refused_at_load(fields: dict[str, object], says: str) -> None:
    """Names full-match [A-Z_][A-Z0-9_]*, STATEWRIGHT_* is reserved, values are text."""
    step = {"id": "s", "kind": "code", "owner": "t", "run": {"command": ["true"]}, **fields}
    with pytest.raises(DefinitionError) as err:
        workflow_from_dict({"workflow": "w", "steps": [step]})
    assert says in str(err.value)


def test_a_human_step_declares_no_environment() -> None:
    """Only steps that run something (ai, code, wait) take env and secrets."""
    step = {"id": "ok", "kind": "human", "owner": "t", "approvers": {"role": "r"}, "env": {"A": "1"}}
    with pytest.raises(DefinitionError) as err:
        workflow_from_dict({"workflow": "w", "steps": [step]})
    assert "unknown field 'env' for a human step" in str(err.value)


def test_a_python_callable_sees_only_what_its_step_declares(
    open_engine: Callable[..., Engine], worker_lib: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In-process callables get the same view in ctx: the declared env and secrets, and the
    delivery count. The builder takes env and secrets like any step field."""
    from statewright.definition import WorkflowBuilder

    monkeypatch.setenv("DEPLOY_TOKEN", "tok-for-the-callable")
    monkeypatch.setenv("PGPASSWORD", secret("pgpw"))
    (worker_lib / "sw_iso_ctx.py").write_text(
        "def look(ctx):\n"
        "    return {'ok': True, 'output': repr((sorted(ctx.env), ctx.deliveries, ctx.redelivered))}\n")
    wf = (WorkflowBuilder("ctx")
          .code("look", owner="t", run={"callable": "sw_iso_ctx:look"}, env={"REGION": "eu"},
                secrets=["DEPLOY_TOKEN"])
          .build())
    assert (wf.steps[0].env, wf.steps[0].secrets) == ({"REGION": "eu"}, ("DEPLOY_TOKEN",))
    engine = open_engine()
    try:
        tid = engine.submit(wf, {})
        Worker(engine).run(until_idle=True)
    finally:
        sys.modules.pop("sw_iso_ctx", None)
    assert engine.state(tid).attempts[0].output == "(['DEPLOY_TOKEN', 'REGION'], 1, False)"
