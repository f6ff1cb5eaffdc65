"""close(): idempotent, and a closed store reopens on use (a stopped manager still
enqueues and reads, DESIGN §4); `report_file_replaced()` on a file deleted under it."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import pytest

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


def test_report_file_replaced_only_when_the_file_went_away(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    store = backend.store
    assert store.report_file_replaced() is False
    if backend.name == "postgres":
        return  # no file to lose
    os.unlink(store.path)
    with caplog.at_level(logging.ERROR, logger="jobledger.storage"):
        assert store.report_file_replaced() is True
        assert store.report_file_replaced() is True
    assert [r.getMessage().count("was deleted or replaced") for r in caplog.records] == [1]


def test_writer_busy_is_a_hint_of_another_writers_transaction(backend: Backend) -> None:
    """True while another writer is inside a write transaction, where the backend can
    tell (SQLite, through its write gate); False when idle, everywhere."""
    store = backend.store
    store.enqueue([new_job()])
    assert store.writer_busy() is False
    other = backend.open_other()
    inside, leave = threading.Event(), threading.Event()

    def hold(conn: Any) -> None:
        other.enqueue([new_job()], conn=conn)
        inside.set()
        assert leave.wait(10), "the test never let the writer go"

    writer = threading.Thread(target=lambda: other.write(hold, "test_hold"))
    writer.start()
    try:
        assert inside.wait(10)
        assert store.writer_busy() is (backend.name == "sqlite")
    finally:
        leave.set()
        writer.join(timeout=10)
    assert store.writer_busy() is False
