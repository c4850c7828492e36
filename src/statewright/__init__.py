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
from statewright._lazy import lazy

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a third of this import)
if TYPE_CHECKING:
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
    from statewright.runtime.run import approve_and_run, run_task, start_task
    from statewright.runtime.users import Principal
    from statewright.runtime.worker import Worker

# The rest of the API is imported on first use (PEP 562): ``import statewright`` loads the
# errors only, and a script pays for the engine, the definitions and YAML when it uses them.
_LAZY = {
    "Workflow": "statewright.definition",
    "WorkflowBuilder": "statewright.definition",
    "load_workflow": "statewright.definition",
    "workflow_from_dict": "statewright.definition",
    "workflow_from_yaml": "statewright.definition",
    "TaskState": "statewright.machine.state",
    "TaskStatus": "statewright.machine.state",
    "transition": "statewright.machine.task",
    "Engine": "statewright.runtime.engine",
    "run_task": "statewright.runtime.run",
    "start_task": "statewright.runtime.run",
    "approve_and_run": "statewright.runtime.run",
    "Principal": "statewright.runtime.users",
    "Worker": "statewright.runtime.worker",
}


__getattr__ = lazy(__name__, _LAZY)


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
    "approve_and_run",
    "load_workflow",
    "run_task",
    "start_task",
    "transition",
    "workflow_from_dict",
    "workflow_from_yaml",
]
