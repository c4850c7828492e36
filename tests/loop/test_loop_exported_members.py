"""The loop package's public surface is pinned."""

from __future__ import annotations

import statewright.loop as loop_pkg


def test_exported_members() -> None:
    """__all__ is sorted, complete and importable."""
    assert loop_pkg.__all__ == sorted(loop_pkg.__all__, key=lambda n: (not n.isupper(), n))
    for name in loop_pkg.__all__:
        assert getattr(loop_pkg, name) is not None
    assert set(loop_pkg.__all__) == {
        "TABLE",
        "CheckOutcome",
        "CheckResult",
        "CommandPassRunner",
        "EnginePassRunner",
        "ItemLedger",
        "ItemStatus",
        "LoopConfig",
        "LoopDefinition",
        "LoopDefinitionError",
        "LoopRunner",
        "LoopState",
        "LoopStatus",
        "LoopStore",
        "PassResult",
        "PassRunner",
        "PassStatus",
        "RecordLine",
        "RunHeldError",
        "RunOutcome",
        "SimInputs",
        "SourceError",
        "Transition",
        "Verdict",
        "WorkItem",
        "exact",
        "initial_state",
        "load_loop",
        "monte_carlo",
        "parse_loop",
        "resume",
        "transition",
    }


def test_pure_core_imports_no_io() -> None:
    """Every module of ``machine/`` (the task and loop reducers, the seam) and the loop's
    simulator import no clock, no randomness, no os, no store, runtime, executor or loop driver."""
    import ast
    from pathlib import Path

    import statewright.machine as machine_pkg

    banned_modules = {"os", "time", "random", "sqlite3", "subprocess", "datetime", "psycopg", "socket"}
    banned_packages = ("statewright.store", "statewright.runtime", "statewright.executors", "statewright.loop",
                       "statewright.server", "statewright.integrations")
    machine_root = Path(machine_pkg.__file__).parent
    modules = [*sorted(machine_root.rglob("*.py")), Path(loop_pkg.__file__).parent / "simulate.py"]
    assert any(m.parent.name == "loop" and m.name == "reducer.py" for m in modules)
    for module in modules:
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = {node.module}
            else:
                continue
            if module.name == "simulate.py" and names == {"random"}:
                continue  # only under TYPE_CHECKING, for the annotation
            bad = {n for n in names if n.split(".")[0] in banned_modules or n.startswith(banned_packages)}
            assert not bad, f"{module} imports {bad}"


def test_the_seam_names_the_runs_outbox_commands_and_prefix() -> None:
    """The task runtime knows a loop run's outbox commands and stream ids by the seam's names
    (without loading the loop); they are the loop's own."""
    from statewright.loop.passes import run_stream
    from statewright.machine.loop.events import DriveRun, WakeRun
    from statewright.machine.seam import LOOP_RUN_COMMANDS, RUN_STREAM_PREFIX

    assert {WakeRun.type, DriveRun.type} == LOOP_RUN_COMMANDS
    assert run_stream("7") == f"{RUN_STREAM_PREFIX}7" == "loop-run-7"
