"""The per-item check: the item's test passes only if fixed-<id> exists.

An item with ``check_barrier: [NAME, SIZE]`` first waits until SIZE checks have reached
barrier NAME (checks run at once meet there; one at a time never would: a fail)."""

import json
import os
import pathlib
import sys
import time

item_id = os.environ["STATEWRIGHT_ITEM_ID"]
barrier = json.loads(os.environ.get("STATEWRIGHT_ITEM", "{}")).get("check_barrier")
if barrier:
    name, size = barrier
    there = pathlib.Path(f"check-barrier-{name}")
    there.mkdir(exist_ok=True)
    (there / item_id).write_text("here", encoding="utf-8")
    deadline = time.monotonic() + 30  # the others are processes started beside this one
    while len(list(there.iterdir())) < size:
        if time.monotonic() > deadline:
            print(f"only {len(list(there.iterdir()))} of {size} checks met at barrier {name}")
            sys.exit(1)
        time.sleep(0.01)
if pathlib.Path(f"fixed-{item_id}").exists():
    print("suite: 0 failed")
    sys.exit(0)
print("FAILED tests/test_export.py::test_export_empty - AssertionError")
print("1 failed (test_export_empty)")
sys.exit(1)
