"""Workflow definitions: parse, validate, hash."""

from statewright.definition.builder import WorkflowBuilder
from statewright.definition.loader import (
    BUILTIN_SCHEMAS,
    load_workflow,
    workflow_from_dict,
    workflow_from_yaml,
)
from statewright.definition.model import (
    OutcomeRoute,
    RetryPolicy,
    Route,
    RouteKind,
    Step,
    StepKind,
    Workflow,
)

__all__ = [
    "BUILTIN_SCHEMAS",
    "OutcomeRoute",
    "RetryPolicy",
    "Route",
    "RouteKind",
    "Step",
    "StepKind",
    "Workflow",
    "WorkflowBuilder",
    "load_workflow",
    "workflow_from_dict",
    "workflow_from_yaml",
]
