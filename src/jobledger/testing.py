"""Helpers for testing code that uses jobledger: a fake clock, and (with the engine)
`drain` and `assert_enqueued`."""

from __future__ import annotations

from jobledger._fake_clock import FakeClock

__all__ = ["FakeClock"]
