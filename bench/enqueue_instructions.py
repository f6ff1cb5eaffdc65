"""Instructions per `enqueue`, for `valgrind --tool=callgrind` (a count a busy machine does
not change, unlike a time):

    valgrind --tool=callgrind python bench/enqueue_instructions.py 200
    valgrind --tool=callgrind python bench/enqueue_instructions.py 1200

runs 200 warm-up enqueues, then N more, on a fresh SQLite file; the difference of the two
totals divided by 1,000 is one enqueue's instructions, start-up and warm-up cancelled out.

`--user` gives each payload a field `user` (`{"user": "u17"}`, not `{}`); `--index`
also declares a search index on `payload.user` first (`jobs.add_search_index`), to see
what one index entry costs an enqueue.
"""

from __future__ import annotations

import os
import sys
import tempfile

import jobledger as jl

JOB = jl.JobType("bench.instructions", dict)


def main() -> None:
    n = int(sys.argv[1])
    user = "--user" in sys.argv[2:]
    with tempfile.TemporaryDirectory() as d:
        jobs = jl.JobManager(os.path.join(d, "jobs.db"), startup_delay=0)
        if "--index" in sys.argv[2:]:
            jobs.add_search_index("payload.user")
        for i in range(200 + n):
            jobs.enqueue(JOB, {"user": f"u{i % 1000}"} if user else {})
        jobs._store.close()


if __name__ == "__main__":
    main()
