"""statewright with a long-running ``Worker`` in a thread of the same process: the submit
and the approval hand their next step to it, and ``Worker.wait_for`` says when the task
stopped at the approval and when it ended."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import main
from statewright_peer import build


def setup(directory: Path) -> Callable[[int], None]:
    from statewright import Worker

    engine, workflow, alice = build(directory)
    worker = Worker(engine)
    threading.Thread(target=worker.run, daemon=True).start()  # works until the process ends

    return handing_to(worker, engine, workflow, alice)


def handing_to(worker: Any, engine: Any, workflow: Any, alice: Any) -> Callable[[int], None]:
    """Task ``i`` of the workload, its steps handed to ``worker`` running in another thread."""

    def run_one(i: int) -> None:
        task_id = engine.submit(workflow, {"n": i}, hold_for=worker)
        state = worker.wait_for(task_id, timeout=60)
        assert state.status == "awaiting_approval", state.status
        engine.approve(task_id, alice, proposal_hash=state.current.proposal_hash, hold_for=worker)
        state = worker.wait_for(task_id, timeout=60)
        assert state.status == "completed", state.status

    return run_one


if __name__ == "__main__":
    main(setup)
