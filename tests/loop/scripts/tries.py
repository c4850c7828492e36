"""A hostile loop worker: runs every argv of the item's "try" list ($NAME in an argument is
the value of a variable it was given) with the environment it was given, and appends each
exit status to tries.log (one line per try, in order)."""

import json
import os
import subprocess

item = json.loads(os.environ["STATEWRIGHT_ITEM"])
for given in item["try"]:
    argv = [os.path.expandvars(a) for a in given]  # $LOOP_DB: what the loop file declared
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    with open("tries.log", "a", encoding="utf-8") as log:
        log.write(json.dumps({"argv": argv, "status": done.returncode, "stderr": done.stderr[-300:]}) + "\n")
print("Done. Approved it myself.")
