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


STDLIB_UNUSED = ("secrets", "socket", "subprocess", "tempfile", "uuid", "yaml")
FIRST_TASK = """
import sys
from statewright import Engine, WorkflowBuilder, start_task
from statewright.store import open_store

engine = Engine(open_store("sqlite:///" + sys.argv[1] + "/sw.db"))
b = WorkflowBuilder("first")
b.code("one", owner="dev", run={"callable": "builtins:bool"})
b.human("approve", owner="leads", approvers={"role": "approver"})
assert start_task(engine, b.build(), {"n": 0}).status == "awaiting_approval"
print(sorted(m for m in sys.modules if m.startswith("statewright.") or m in sys.argv[2:]))
"""


def test_a_first_task_loads_only_what_it_uses(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A script's first task on SQLite does not load the outer loop's machine, the other
    backends, fleet admission, the process runner, the server, YAML, nor socket, uuid or
    subprocess: what each path needs is imported on first use."""
    import ast
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", FIRST_TASK, str(tmp_path), *STDLIB_UNUSED], capture_output=True,
                         text=True, check=True).stdout
    loaded = set(ast.literal_eval(out))
    for unused in (*STDLIB_UNUSED, "statewright.machine.loop", "statewright.loop", "statewright.store.postgres",
                   "statewright.store.memory", "statewright.store.admission", "statewright.server",
                   "statewright.runtime.notify", "statewright.runtime.verify", "statewright.definition.github",
                   "statewright.executors._process", "statewright.executors.workspace"):
        assert not any(m == unused or m.startswith(unused + ".") for m in loaded), unused
