"""Times as text (HTTP API, CLI `--json`, `JobSnapshot.to_json`): ISO-8601 UTC with six
fractional digits, so that the strings sort as the times do."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import jobledger as jl
from jobledger._observe.read_model import iso
from jobledger.testing import FakeClock


def test_a_whole_second_keeps_its_fraction_and_sorts_before_later_times() -> None:
    whole, later = 1_764_512_931_000, 1_764_512_931_029  # ...:51.000 and ...:51.029
    assert iso(whole) == "2025-11-30T14:28:51.000000Z"
    assert iso(later) == "2025-11-30T14:28:51.029000Z"
    times = [later, whole, whole + 1_000, whole - 1]
    assert sorted(iso(t) or "" for t in times) == [iso(t) for t in sorted(times)]


def test_datetimes_are_written_the_same_way() -> None:
    assert iso(datetime(2026, 1, 1, tzinfo=UTC)) == "2026-01-01T00:00:00.000000Z"
    assert iso(None) is None


def test_a_snapshot_made_on_a_whole_second_says_so_with_its_fraction(tmp_path: Path) -> None:
    jobs = jl.JobManager(str(tmp_path / "jobs.db"), clock=FakeClock())  # starts on 00:00:00
    job = jobs.enqueue(jl.JobType("t", dict[str, int]), {})
    assert job.snapshot.to_json()["created_at"] == "2026-01-01T00:00:00.000000Z"
    asyncio.run(jobs.stop())
