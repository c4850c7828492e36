"""A hostile command agent: ``python command_agent.py CASE`` does to $STATEWRIGHT_VERDICT (and
its stdout) what CASE says. Run by the poison tests as a real process."""

from __future__ import annotations

import os
import sys

MB = 1_000_000
VALID = '{"approved": true}'


def main(case: str) -> None:
    path = os.environ["STATEWRIGHT_VERDICT"]
    texts = {
        "clean": VALID,
        "lone surrogate in verdict": '{"approved": true, "summary": "\\ud800"}',
        "verdict nested 5,000 deep": '{"approved": true, "data": ' + "[" * 5000 + "]" * 5000 + "}",
        "verdict objects nested 200 deep": '{"approved": true, "data": ' + '{"a": ' * 200 + "1" + "}" * 200 + "}",
        "NaN in verdict": '{"approved": true, "score": NaN}',
        "Infinity in verdict": '{"approved": true, "score": -Infinity}',
        "5,000-digit integer in verdict": '{"approved": true, "score": 1' + "0" * 5000 + "}",
        "2 MB verdict": '{"approved": true, "summary": "' + "v" * (2 * MB) + '"}',
        "20 MB note": VALID,
        "lone surrogate bytes on stdout": VALID,
    }
    if case == "verdict is a FIFO":
        os.mkfifo(path)
    elif case == "verdict is a symlink to /dev/zero":
        os.symlink("/dev/zero", path)
    elif case == "verdict is a directory":
        os.mkdir(path)
    elif case == "verdict is not UTF-8":
        with open(path, "wb") as fh:
            fh.write(b'{"approved": true, "summary": "\xff\xfe"}')
    else:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(texts[case])
    if case == "20 MB note":
        sys.stdout.write("n" * (20 * MB))
    if case == "lone surrogate bytes on stdout":
        sys.stdout.buffer.write(b"note \xed\xa0\x80 end\n")


if __name__ == "__main__":
    main(sys.argv[1])
