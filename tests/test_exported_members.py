"""The public surface is one sorted __all__; this pins it."""

import statewright

EXPECTED = [
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


def test_all_is_pinned_and_sorted() -> None:
    """__all__ lists exactly the public names, sorted, and each one resolves."""
    assert statewright.__all__ == EXPECTED
    for name in EXPECTED:
        assert getattr(statewright, name) is not None
