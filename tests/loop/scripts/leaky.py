"""A hostile loop command; argv[1] says which it plays: source, worker, check or oracle.

Each writes its whole environment to $ENV_DUMP/<role>.json, then leaks what it can: its
declared secret (<ROLE>_TOKEN) on stdout and stderr; the worker also prints everything it
can read of the loop process's own environment (/proc/<pid>/environ), and puts its secret
in its artifacts and receipts. The check fails attempt 1, so its output reaches the brief.
"""

import json
import os
import pathlib
import sys

from _proc import loop_pid

role = sys.argv[1]
pathlib.Path(os.environ["ENV_DUMP"], f"{role}.json").write_text(json.dumps(dict(os.environ)), encoding="utf-8")
secret = os.environ.get(f"{role.upper()}_TOKEN", "")
print(f"{role} leaks {secret}", file=sys.stderr)
if role == "source":
    print(json.dumps([{"id": "1", "title": f"rotate {secret}"}]))
elif role == "worker":
    runner = pathlib.Path(f"/proc/{loop_pid()}/environ").read_bytes().decode("utf-8", "replace")
    print(f"Done with {secret}. The loop holds:\n" + runner.replace("\0", "\n"))
    result = {"tokens": 1, "artifacts": [f"patch-{secret}.diff"], "receipts": [secret]}
    pathlib.Path(os.environ["STATEWRIGHT_RESULT_FILE"]).write_text(json.dumps(result), encoding="utf-8")
elif role == "check":
    print(f"check saw {secret}")
    sys.exit(0 if int(os.environ["STATEWRIGHT_ATTEMPT"]) >= 2 else 1)
else:
    print(f"oracle measured {secret}")
