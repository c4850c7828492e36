"""Workflows, people and calls for the API tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2 as httpx
from starlette.testclient import TestClient

from people.support import People
from statewright.definition.loader import workflow_from_dict
from statewright.definition.model import Workflow
from statewright.machine.state import TaskStatus
from statewright.runtime.engine import Engine
from statewright.runtime.worker import Worker


def workflows() -> dict[str, Workflow]:
    """gate: build, a maintainer's approval (1h), ship. duty: an author proposes, a maintainer
    who did not propose signs off. payment: finance approves, scoped by the input's region."""
    gate = workflow_from_dict({"workflow": "gate", "steps": [
        {"id": "build", "kind": "code", "owner": "ci", "run": {"command": ["sh", "-c", "echo built"]}},
        {"id": "approve", "kind": "human", "owner": "leads", "approvers": {"role": "maintainer"},
         "expires_after": "1h"},
        {"id": "ship", "kind": "code", "owner": "ci", "run": {"command": ["sh", "-c", "echo shipped"]},
         "on_success": "complete"},
    ]}, "<gate>")
    duty = workflow_from_dict({"workflow": "duty", "steps": [
        {"id": "propose", "kind": "human", "owner": "authors", "approvers": {"role": "author"}},
        {"id": "sign-off", "kind": "human", "owner": "leads", "approvers": {"role": "maintainer"},
         "separate_from": ["propose"]},
    ]}, "<duty>")
    payment = workflow_from_dict({"workflow": "payment", "input_schema": {
        "type": "object", "properties": {"region": {"type": "string"}, "amount": {"type": "integer"}},
        "required": ["region"], "additionalProperties": False}, "steps": [
        {"id": "approve", "kind": "human", "owner": "finance",
         "approvers": {"role": "finance", "scope": {"region": "input.region"}}},
    ]}, "<payment>")
    broken = workflow_from_dict({"workflow": "broken", "steps": [
        {"id": "fail", "kind": "code", "owner": "ci", "run": {"command": ["sh", "-c", "exit 3"]}},
    ]}, "<broken>")
    return {"gate": gate, "duty": duty, "payment": payment, "broken": broken}


@dataclass
class World:
    engine: Engine
    client: TestClient
    workflows: dict[str, Workflow]
    loop_db: Path
    people: People = field(init=False)

    def __post_init__(self) -> None:
        self.people = People(self.engine)
        for name, roles in {"mia": ("maintainer",), "bob": ("author", "maintainer"), "eve": ("viewer",),
                            "ops": ("operator",), "fin-eu": ("finance:region=eu",)}.items():
            self.people.add(name, *roles)

    def auth(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.people.tokens[name]}"}

    def get(self, path: str, who: str | None = None, **kw: Any) -> httpx.Response:
        return self.client.get(path, headers=self.auth(who) if who else {}, **kw)

    def post(self, path: str, body: Any, who: str | None = None, **kw: Any) -> httpx.Response:
        return self.client.post(path, json=body, headers=self.auth(who) if who else {}, **kw)

    def settle(self) -> None:
        Worker(self.engine).run(until_idle=True)

    def waiting(self, workflow: str = "gate", data: dict[str, Any] | None = None) -> tuple[str, str]:
        """A task of ``workflow`` waiting for an approval, and its proposal hash."""
        tid = self.engine.submit(self.workflows[workflow], data or {})
        self.settle()
        self.engine.clock.advance(1)  # type: ignore[attr-defined]  # tasks list in the order made
        st = self.engine.state(tid)
        assert st.status is TaskStatus.AWAITING_APPROVAL and st.current is not None
        return tid, st.current.proposal_hash

    def halted(self) -> str:
        tid = self.engine.submit(self.workflows["broken"], {})
        self.settle()
        self.engine.clock.advance(1)  # type: ignore[attr-defined]
        assert self.engine.state(tid).status is TaskStatus.HALTED
        return tid


def refused(response: httpx.Response, status: int, code: str | None = None) -> str:
    """The refusal's one line, after checking its status, code and that it is JSON."""
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert set(body) <= {"error", "code", "task_id"} and "\n" not in body["error"], body
    if code is not None:
        assert body["code"] == code, body
    return str(body["error"])
