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
    "approve_and_run",
    "load_workflow",
    "run_task",
    "start_task",
    "transition",
    "workflow_from_dict",
    "workflow_from_yaml",
]


def test_all_is_pinned_and_sorted() -> None:
    """__all__ lists exactly the public names, sorted, and each one resolves."""
    assert statewright.__all__ == EXPECTED
    for name in EXPECTED:
        assert getattr(statewright, name) is not None


def test_import_statewright_loads_the_errors_only() -> None:
    """``import statewright`` stays cheap: the engine, the definitions and YAML load on first use."""
    import subprocess
    import sys

    code = "import statewright, sys; print(sorted(m for m in sys.modules if m.startswith(('statewright.', 'yaml'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['statewright._errors', 'statewright._lazy']"
