"""A small Python builder. Definitions are data: the builder writes the same mapping a
YAML file holds and hands it to the one loader, so every rule applies."""

from __future__ import annotations

from typing import Any

from statewright.definition.loader import workflow_from_dict
from statewright.definition.model import Workflow


class WorkflowBuilder:
    """``WorkflowBuilder("fix-bug").ai("implement", owner="t", agent={...}).build()``"""

    def __init__(self, name: str, *, version: int = 1, description: str = "") -> None:
        self._data: dict[str, Any] = {"workflow": name, "version": version, "steps": []}
        if description:
            self._data["description"] = description

    def input_schema(self, schema: dict[str, Any]) -> WorkflowBuilder:
        self._data["input_schema"] = schema
        return self

    def step(self, step_id: str, kind: str, *, owner: str, **fields: Any) -> WorkflowBuilder:
        self._data["steps"].append({"id": step_id, "kind": kind, "owner": owner, **fields})
        return self

    def ai(self, step_id: str, *, owner: str, **fields: Any) -> WorkflowBuilder:
        return self.step(step_id, "ai", owner=owner, **fields)

    def code(self, step_id: str, *, owner: str, **fields: Any) -> WorkflowBuilder:
        return self.step(step_id, "code", owner=owner, **fields)

    def human(self, step_id: str, *, owner: str, **fields: Any) -> WorkflowBuilder:
        return self.step(step_id, "human", owner=owner, **fields)

    def wait(self, step_id: str, *, owner: str, **fields: Any) -> WorkflowBuilder:
        return self.step(step_id, "wait", owner=owner, **fields)

    def to_dict(self) -> dict[str, Any]:
        return {**self._data, "steps": [dict(s) for s in self._data["steps"]]}

    def build(self, source: str = "<builder>") -> Workflow:
        return workflow_from_dict(self.to_dict(), source)
