"""The goal oracle: every item of backlog.jsonl has its fix; prints what it measured."""

import json
import pathlib
import sys

text = pathlib.Path("backlog.jsonl").read_text(encoding="utf-8")
ids = [json.loads(line)["id"] for line in text.splitlines() if line.strip()]
missing = [i for i in ids if not pathlib.Path(f"fixed-{i}").exists()]
if missing:
    print(f"suite: {len(missing)} failed ({', '.join(missing)})")
    sys.exit(1)
print(f"suite: 0 failed, {len(ids)} passed; lint clean")
