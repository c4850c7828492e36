"""A workflow with a remote step, and the people around it, for the remote-agent tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statewright.definition.loader import workflow_from_dict
from statewright.definition.model import Workflow
from statewright.runtime.engine import Engine
from statewright.runtime.remote import RemoteAgents
from statewright.runtime.users import Principal
from statewright.runtime.worker import Worker

VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "summary": {"type": "string"}},
    "required": ["approved"],
}


def remote_flow(*, heartbeat: str = "30s", timeout: str = "10m", queue: str = "builds") -> Workflow:
    """prepare (code), review (remote agent; a failure loops back to prepare, twice at most),
    ship (code)."""
    return workflow_from_dict({"workflow": "remote-review", "steps": [
        {"id": "prepare", "kind": "code", "owner": "ci", "run": {"command": ["true"]}},
        {"id": "review", "kind": "ai", "owner": "bots", "instructions": "Review the change.",
         "agent": {"type": "remote", "queue": queue, "heartbeat": heartbeat}, "timeout": timeout,
         "output_schema": VERDICT_SCHEMA, "on_failure": {"loop_back": "prepare", "max_attempts": 2}},
        {"id": "ship", "kind": "code", "owner": "ci", "run": {"command": ["true"]}},
    ]}, "<remote-review>")


@dataclass(frozen=True)
class People:
    admin: Principal
    builder: Principal  # agent:queue=builds
    other: Principal  # agent:queue=builds as well
    stranger: Principal  # agent for another queue
    nobody: Principal  # no agent role


def people(engine: Engine) -> People:
    users = engine.users
    boot = users.bootstrap("ada")
    admin = users.authenticate(boot.token)

    def person(name: str, roles: list[str]) -> Principal:
        users.add(admin, name, roles)
        return users.authenticate(users.issue_token(admin, name).token)

    return People(
        admin=admin,
        builder=person("builder", ["agent:queue=builds", "maintainer"]),
        other=person("other-bot", ["agent"]),
        stranger=person("stranger", ["agent:queue=deploys"]),
        nobody=person("nobody", ["viewer"]),
    )


def agents(engine: Engine) -> RemoteAgents:
    return RemoteAgents(engine)


def settle(engine: Engine) -> None:
    """Run a worker until nothing is left to do now (parked attempts wait for their agents)."""
    Worker(engine, idle_poll_seconds=0.0).run(until_idle=True)


def attempts(engine: Engine, task_id: str) -> list[tuple[str, int, str, str, str]]:
    """(step, number, outcome, reason, actor) of every recorded attempt."""
    return [(a.step, a.number, a.outcome.value, a.reason, a.actor) for a in engine.state(task_id).attempts]


def event_count(engine: Engine, task_id: str) -> int:
    return len(engine.store.events(task_id))


def good(**extra: Any) -> dict[str, Any]:
    return {"approved": True, "summary": "looks right", **extra}
