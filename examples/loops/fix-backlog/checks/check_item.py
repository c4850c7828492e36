"""Per-item check: run the item's tests against what the worker wrote."""

import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(__file__))
from cases import check  # noqa: E402

item_id = os.environ["STATEWRIGHT_ITEM_ID"]
try:
    check(item_id)
except Exception as exc:
    traceback.print_exc()
    print(f"1 failed ({exc})")
    sys.exit(1)
print(f"{item_id}: all tests passed")
