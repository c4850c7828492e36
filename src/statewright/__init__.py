"""statewright: run AI-agent work as explicit, durable state machines."""

from statewright._errors import (
    AccessError,
    ApprovalError,
    AuthenticationError,
    ConflictError,
    DefinitionError,
    IllegalEventError,
    InputError,
    PermanentError,
    PermissionDeniedError,
    StatewrightError,
    TaskNotFoundError,
    TaskTokenError,
    TransientError,
    VersionConflictError,
)
from statewright.definition import (
    Workflow,
    WorkflowBuilder,
    load_workflow,
    workflow_from_dict,
    workflow_from_yaml,
)
from statewright.machine.state import TaskState, TaskStatus
from statewright.machine.task import transition
from statewright.runtime.engine import Engine
from statewright.runtime.run import run_task
from statewright.runtime.users import Principal
from statewright.runtime.worker import Worker

__version__ = "0.1.0"

__all__ = [
    "AccessError",
    "ApprovalError",
    "AuthenticationError",
    "ConflictError",
    "DefinitionError",
    "Engine",
    "IllegalEventError",
    "InputError",
    "PermanentError",
    "PermissionDeniedError",
    "Principal",
    "StatewrightError",
    "TaskNotFoundError",
    "TaskState",
    "TaskStatus",
    "TaskTokenError",
    "TransientError",
    "VersionConflictError",
    "Worker",
    "Workflow",
    "WorkflowBuilder",
    "__version__",
    "load_workflow",
    "run_task",
    "transition",
    "workflow_from_dict",
    "workflow_from_yaml",
]
