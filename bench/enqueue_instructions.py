"""Instructions per `enqueue`, for `valgrind --tool=callgrind` (a count a busy machine does
not change, unlike a time):

    valgrind --tool=callgrind python bench/enqueue_instructions.py 200
    valgrind --tool=callgrind python bench/enqueue_instructions.py 1200

runs 200 warm-up enqueues, then N more, on a fresh SQLite file; the difference of the two
totals divided by 1,000 is one enqueue's instructions, start-up and warm-up cancelled out.
"""

from __future__ import annotations

import os
import sys
import tempfile

import jobledger as jl

JOB = jl.JobType("bench.instructions", dict)


def main() -> None:
    n = int(sys.argv[1])
    with tempfile.TemporaryDirectory() as d:
        jobs = jl.JobManager(os.path.join(d, "jobs.db"), startup_delay=0)
        for _ in range(200):
            jobs.enqueue(JOB, {})
        for _ in range(n):
            jobs.enqueue(JOB, {})
        jobs._store.close()


if __name__ == "__main__":
    main()
