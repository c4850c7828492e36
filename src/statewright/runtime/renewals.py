"""One thread per process renews the leases of every worker that works a task in its
caller's thread (``Worker.run_one``). A thread started and joined per call cost more than a
short step does; this one is started once and sleeps while no such worker holds leases.

A worker joins when its call starts and leaves when it ends. ``leave`` returns only after
any renewal of that worker under way has ended, and none starts after it: the caller then
releases its leases knowing that nothing will renew them again."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Renewing(Protocol):
    """What the renewer needs of a worker: a lock held while its leases are renewed, and the
    renewal itself (which stops the worker itself when the store is lost)."""

    renewing: threading.Lock

    def renew_held(self) -> bool: ...


class Renewals:
    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._due: dict[Renewing, tuple[float, float]] = {}  # worker -> (next renewal, interval)
        self._thread: threading.Thread | None = None

    def join(self, worker: Renewing, interval: float) -> None:
        """Renew ``worker``'s leases every ``interval`` seconds until it leaves."""
        with self._cv:
            self._due[worker] = (time.monotonic() + interval, interval)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="statewright-renewals", daemon=True)
                self._thread.start()
            self._cv.notify()

    def leave(self, worker: Renewing) -> None:
        with self._cv:
            self._due.pop(worker, None)
        with worker.renewing:  # a renewal under way ends first; the next finds it gone
            pass

    def _run(self) -> None:
        while True:
            with self._cv:
                now = time.monotonic()
                due = [w for w, (at, _) in self._due.items() if at <= now]
                for w in due:
                    self._due[w] = (now + self._due[w][1], self._due[w][1])
                if not due:
                    upcoming = min((at for at, _ in self._due.values()), default=None)
                    self._cv.wait(None if upcoming is None else upcoming - now)
                    continue
            for w in due:
                with w.renewing:
                    with self._cv:
                        still = w in self._due
                    if still:
                        w.renew_held()


RENEWALS = Renewals()
