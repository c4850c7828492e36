"""DBOS on SQLite: one workflow of DBOS steps; the approval is DBOS.recv, answered by DBOS.send."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from _common import main


def setup(directory: Path) -> Callable[[int], None]:
    from dbos import DBOS, SetWorkflowID

    DBOS(config={"name": "peer-workload", "system_database_url": f"sqlite:///{directory / 'dbos.db'}",
                 "run_admin_server": False, "log_level": "WARNING"})

    @DBOS.step()
    def trivial() -> None:
        return None

    @DBOS.step()
    def review(attempt: int) -> bool:
        return attempt > 1

    @DBOS.workflow()
    def workload(n: int) -> int:
        attempt = 0
        while True:
            attempt += 1
            trivial()  # implement
            trivial()  # check
            if review(attempt):
                break
        approved = DBOS.recv("approval", timeout_seconds=60)
        assert approved == "yes"
        trivial()  # merge
        return n

    DBOS.launch()

    def run_one(i: int) -> None:
        with SetWorkflowID(f"t{i}"):
            handle = DBOS.start_workflow(workload, i)
        DBOS.send(f"t{i}", "yes", "approval")
        assert handle.get_result() == i

    return run_one


if __name__ == "__main__":
    main(setup)
