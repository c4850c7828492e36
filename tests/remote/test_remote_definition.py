"""A remote agent is checked when its workflow loads: each mistake is one line, and the
worker never runs a remote agent itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from statewright._errors import PermanentError
from statewright.cli import cli
from statewright.definition.loader import workflow_from_dict
from statewright.definition.model import DEFAULT_HEARTBEAT_SECONDS
from statewright.executors import run_agent
from statewright.executors.base import ExecContext


def flow(step: dict[str, Any]) -> dict[str, Any]:
    return {"workflow": "w", "steps": [{"id": "s", "owner": "team", **step}]}


@pytest.mark.parametrize(("step", "line"), [
    ({"kind": "ai", "agent": {"type": "remote", "queue": "Bad Queue"}},
     "step 's': agent: queue name 'Bad Queue' must be 1 to 64 lower-case letters"),
    ({"kind": "ai", "agent": {"type": "remote"}},
     "step 's': agent: a remote agent needs a 'queue'"),
    ({"kind": "ai", "agent": {"type": "remote", "queue": "q", "heartbeat": "soon"}},
     "step 's': agent: agent 'heartbeat'"),
    ({"kind": "ai", "agent": {"type": "remote", "queue": "q", "heartbeat": "500ms"}},
     "step 's': agent: agent 'heartbeat' must be at least 1s"),
    ({"kind": "ai", "agent": {"type": "remote", "queue": "q", "timeout": "5m"}},
     "step 's': agent: agent 'timeout' is not for a remote agent; give the step a 'timeout'"),
    ({"kind": "ai", "agent": {"type": "remote", "queue": "q", "host": "x"}},
     "step 's': agent: agent has unknown key"),
    ({"kind": "human", "approvers": {"role": "lead"}, "agent": {"type": "remote", "queue": "q"}},
     "step 's': unknown field 'agent' for a human step (it belongs to ai, code steps)"),
    ({"kind": "wait", "check": {"command": ["true"]}, "every": "1m", "max_checks": 2,
      "agent": {"type": "remote", "queue": "q"}},
     "step 's': unknown field 'agent' for a wait step (it belongs to ai, code steps)"),
])
def test_a_bad_remote_agent_is_one_line(tmp_path: Path, step: dict[str, Any], line: str) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(flow(step)))
    out = CliRunner().invoke(cli, ["validate", str(path)])
    assert out.exit_code == 1
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and line in lines[0], out.output


def test_a_remote_step_loads_with_its_queue_and_heartbeat() -> None:
    wf = workflow_from_dict(flow({"kind": "ai", "agent": {"type": "remote", "queue": "reviews.eu-1"}}))
    remote = wf.step("s").remote
    assert remote is not None
    assert (remote.queue, remote.heartbeat_seconds) == ("reviews.eu-1", DEFAULT_HEARTBEAT_SECONDS)
    hb = workflow_from_dict(flow({"kind": "ai", "agent": {"type": "remote", "queue": "q", "heartbeat": "2m"}}))
    assert hb.step("s").remote.heartbeat_seconds == 120  # type: ignore[union-attr]
    local = workflow_from_dict(flow({"kind": "ai", "agent": {"type": "command", "command": ["true"]}}))
    assert local.step("s").remote is None


def test_the_worker_side_never_runs_a_remote_agent(tmp_path: Path) -> None:
    ctx = ExecContext(task_id="t-1", step="s", attempt=1, idempotency_key="t-1/s/1", workspace=tmp_path)
    with pytest.raises(PermanentError, match="statewright agent"):
        run_agent({"type": "remote", "queue": "q"}, {}, None, ctx)


@pytest.mark.parametrize(("step", "line"), [
    ({"kind": "code", "agent": {"type": "command", "command": ["true"]}},
     "step 's': a code step's 'agent' must be a remote one"),
    ({"kind": "code", "run": {"command": ["true"]}, "agent": {"type": "remote", "queue": "q"}},
     "step 's': a code step takes 'run' or a remote 'agent', not both"),
])
def test_a_code_steps_agent_is_remote_or_nothing(tmp_path: Path, step: dict[str, Any], line: str) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(flow(step)))
    out = CliRunner().invoke(cli, ["validate", str(path)])
    assert out.exit_code == 1 and line in out.output, out.output
