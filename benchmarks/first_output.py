#!/usr/bin/env python3
"""Seconds until a command shows its first output on a terminal, and until it exits.

    python benchmarks/first_output.py traceinspect report DIR --no-cache

The command runs under a pseudo-terminal (as in a user's shell, so progress bars that only show on a terminal
count); stdout and stderr both go to it; escape sequences alone (hiding the cursor) are not output. Prints one JSON line: {"first_output_s", "exit_s", "rc", "first"}.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import sys
import time


_ESCAPES = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")  # cursor moves, colours: not output


def main(argv: list[str]) -> int:
    if not argv:
        raise SystemExit(__doc__)
    t0 = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command, on the terminal
        os.execvp(argv[0], argv)
    first_s, first = None, b""
    while True:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the terminal closed: the command exited
                break
            if not data:
                break
            visible = _ESCAPES.sub(b"", data).strip()
            if first_s is None and visible:
                first_s, first = time.perf_counter() - t0, visible[:80]
    _, status = os.waitpid(pid, 0)
    exit_s = time.perf_counter() - t0
    print(json.dumps({"first_output_s": round(first_s, 3) if first_s is not None else None,
                      "exit_s": round(exit_s, 3), "rc": os.waitstatus_to_exitcode(status),
                      "first": first.decode(errors="replace")}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
