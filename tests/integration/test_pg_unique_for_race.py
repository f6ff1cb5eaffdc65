"""`unique_for` on PostgreSQL while the key's job ends: no second job.

`ENQUEUE_UNLESS_ENDED` looks for a job that ended with the key in its statement's
snapshot, and its `ON CONFLICT` arbiter on the live rows as they are when it inserts.
A job that ends between the two (its finalize committed while the enqueue waited on the
row) is in neither: running in the snapshot, no longer live for the arbiter. Found by
`bench/chaos.py --backend postgres --seed 1` (a batch re-sent after a terminated
connection, one of its jobs finishing meanwhile: a job ran twice; docs/reliability.md).
The store looks again after an insert, in a fresh snapshot, and takes the insert back
when a job with the key ended meanwhile.
"""

from __future__ import annotations

import threading
import time

from jobledger._storage import layout as L
from jobledger._storage.interface import JobFilter, KeyRule
from jobledger._storage.postgres.store import PostgresStore
from tests.conformance import claim
from tests.conformance.conftest import PG_DSN
from tests.conformance.test_enqueue_keyed import keyed


def test_a_job_that_ends_while_its_key_is_enqueued_again_is_the_answer(
    pg_store: PostgresStore,
) -> None:
    import psycopg

    first = pg_store.enqueue_rows([keyed("k", 1_000)])[0]
    assert [j.id for j in claim(pg_store, now=2_000).jobs] == [first[L.C_ID]]
    answers: list[tuple[object, ...]] = []
    errors: list[BaseException] = []

    def enqueue_again() -> None:
        try:
            answers.append(
                pg_store.enqueue_keyed([keyed("k", 3_000)], [KeyRule("unique_for", 60_000)])[0]
            )
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    # The job's finalize, held open: the enqueue's snapshot sees the job running, and
    # its insert waits on the row until the finalize commits.
    with psycopg.connect(PG_DSN) as finalizer:
        finalizer.execute(
            f"UPDATE \"{pg_store.schema}\".jobs SET status = 'completed', finished_at = 2500, "
            "updated_at = 2500 WHERE id = %s",
            (first[L.C_ID],),
        )
        enqueuer = threading.Thread(target=enqueue_again)
        enqueuer.start()
        waited = _wait_for_lock_wait(pg_store.schema)
        finalizer.commit()
    enqueuer.join(timeout=30)
    assert waited, "the enqueue never waited on the finalized row"
    assert not errors, errors
    [answer] = answers
    assert (answer[L.C_ID], answer[L.C_STATUS]) == (first[L.C_ID], "completed")
    assert pg_store.count(JobFilter()) == 1


def _wait_for_lock_wait(schema: str, timeout: float = 10.0) -> bool:
    """Whether a session of this test's schema came to wait on a lock."""
    import psycopg

    deadline = time.monotonic() + timeout
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        while time.monotonic() < deadline:
            waiting = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE %s",
                (f'%"{schema}"%',),
            ).fetchone()
            if waiting is not None and waiting[0] > 0:
                return True
            time.sleep(0.01)
    return False
