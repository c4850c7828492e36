"""What a loop test script knows of the processes above it (Linux /proc)."""

import os
import pathlib


def loop_pid() -> int:
    """The loop process: the parent, or its parent when the step supervisor sits between."""
    pid = os.getppid()
    if b"statewright-step" in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return pid


def meet(name: str, size: int, who: str) -> int:
    """Arrive at barrier ``name`` as ``who`` and wait until ``size`` have arrived (processes
    started beside this one): the count there, which is below ``size`` after 30 s."""
    import time

    there = pathlib.Path(f"barrier-{name}")
    there.mkdir(exist_ok=True)
    (there / who).write_text("here", encoding="utf-8")
    deadline = time.monotonic() + 30
    while (count := len(list(there.iterdir()))) < size and time.monotonic() < deadline:
        time.sleep(0.01)
    return count
