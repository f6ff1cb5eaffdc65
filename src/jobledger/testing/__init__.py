"""Helpers for testing code that uses jobledger: a fake clock, `drain` and `assert_enqueued`.

    clock = FakeClock()
    jobs = make_jobs(tmp_path / "jobs.db", clock=clock, startup_delay=0)
    async with jobs:
        jobs.enqueue(SEND, Send(to="a@example.com"))
        done = await drain(jobs)          # runs everything, retries included
    assert [s.status for s in done] == ["completed"]

Only the names in `__all__` live here (`tests/test_public_api.py` guards it): the
helpers are written in `_helpers.py` with the library's private modules, which this
package does not pass on. The docs are in docs/reference/api.md#jobledgertesting.
"""

from jobledger.testing._helpers import FakeClock, assert_enqueued, drain

__all__ = ["FakeClock", "assert_enqueued", "drain"]
