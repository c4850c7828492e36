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
    """The reducer and the simulator import no clock, no randomness, no os, no store."""
    import ast
    from pathlib import Path

    root = Path(loop_pkg.__file__).parent
    banned = {
        "os",
        "time",
        "random",
        "sqlite3",
        "subprocess",
        "datetime",
        "statewright.loop.store",
        "statewright.loop.runner",
    }
    for module in ("reducer.py", "_handlers.py", "_moves.py", "model.py", "events.py", "simulate.py"):
        tree = ast.parse((root / module).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = {node.module}
            else:
                continue
            if module == "simulate.py" and names == {"random"}:
                continue  # only under TYPE_CHECKING, for the annotation
            assert not names & banned, f"{module} imports {names & banned}"
