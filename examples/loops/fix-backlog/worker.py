"""A stand-in for an AI worker: writes work/<id>.py for the item it is given.

It reads the brief on stdin (the item, and why the previous attempt failed), and it
always reports success. On its first attempt at 'export-empty' it gets the edge case
wrong, like a worker that says "Done. All tests pass." while a test still fails.
"""

import json
import os
import pathlib
import sys

SOLUTIONS = {
    "slugify": (
        "import re\n\n"
        "def slugify(text):\n"
        "    return re.sub(r'[^a-z0-9]+', '-', text.lower()).strip('-')\n"
    ),
    "clamp": "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n",
    "export-empty": (
        "def export_csv(rows):\n"
        "    lines = ['id,name'] + [f\"{r['id']},{r['name']}\" for r in rows]\n"
        "    return '\\n'.join(lines) + '\\n'\n"
    ),
}
FIRST_TRY = {
    "export-empty": (
        "def export_csv(rows):\n"
        "    if not rows:\n"
        "        return ''\n"
        "    lines = ['id,name'] + [f\"{r['id']},{r['name']}\" for r in rows]\n"
        "    return '\\n'.join(lines) + '\\n'\n"
    ),
}

brief = sys.stdin.read()
item = json.loads(os.environ["STATEWRIGHT_ITEM"])
attempt = int(os.environ["STATEWRIGHT_ATTEMPT"])
code = SOLUTIONS[item["id"]]
if attempt == 1 and "previous attempt was rejected" not in brief:
    code = FIRST_TRY.get(item["id"], code)
work = pathlib.Path("work")
work.mkdir(exist_ok=True)
(work / f"{item['id'].replace('-', '_')}.py").write_text(code, encoding="utf-8")
with open(os.environ["STATEWRIGHT_RESULT_FILE"], "w", encoding="utf-8") as f:
    json.dump({"tokens": 1200, "money_usd": 0.02, "artifacts": [f"work/{item['id']}.py"]}, f)
print("Done. All tests pass.")
