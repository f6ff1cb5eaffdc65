"""`python -m tests.schedules.ensure_proc`: import `tests.schedules.declared` on cue.

Prints `ready` once Python and jobledger are loaded, waits for a line on stdin, then
imports the app module (which declares its schedule) and prints the schedule id it got,
so a parent can release several of these at the same moment. An exception exits non-zero
with its traceback on stderr.
"""

from __future__ import annotations

import asyncio
import importlib
import sys

import jobledger  # noqa: F401  (loaded before `ready`: only the import itself is timed)


def main() -> int:
    print("ready", flush=True)
    sys.stdin.readline()
    app = importlib.import_module("tests.schedules.declared")
    print(app.SID, flush=True)
    asyncio.run(app.jobs.stop())
    return 0


if __name__ == "__main__":
    sys.exit(main())
