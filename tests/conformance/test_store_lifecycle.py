"""close(): idempotent, and a closed store reopens on use (a stopped manager still
enqueues and reads, DESIGN §4)."""

from __future__ import annotations

from tests.conformance import Backend, new_job


def test_a_closed_store_reopens_on_use(backend: Backend) -> None:
    store = backend.store
    store.enqueue([new_job()])
    store.close()
    store.close()
    job = new_job()
    store.enqueue([job])
    assert store.get(job.id) is not None
    assert isinstance(store.data_version(), int)
    store.close()
    assert store.get(job.id) is not None
