"""Merging an operator's change into a queue's settings (`queue_settings`), once for
every backend: each store reads the row and writes what this returns in one write
transaction, so two changes to different fields from two processes both hold."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jobledger._storage.observe import QueueSettingsRecord

__all__ = ["FIELDS", "merged", "record_of"]

FIELDS = ("concurrency", "rate_limit", "rate_per_ms", "paused")


def record_of(queue: str, row: Sequence[Any]) -> QueueSettingsRecord:
    """The record of a row `(concurrency, rate_limit, rate_per_ms, paused, updated_at)`,
    as every backend selects them."""
    conc, limit, per, paused, updated = row

    def opt(v: Any) -> int | None:
        return None if v is None else int(v)

    return QueueSettingsRecord(queue, opt(conc), opt(limit), opt(per), bool(paused), int(updated))


def merged(
    queue: str, current: QueueSettingsRecord | None, changes: Mapping[str, Any], now_ms: int
) -> QueueSettingsRecord | None:
    """The settings after `changes`; None when nothing is left set (the row goes)."""
    unknown = set(changes) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown queue settings {sorted(unknown)}")
    values: dict[str, Any] = {
        "concurrency": None,
        "rate_limit": None,
        "rate_per_ms": None,
        "paused": False,
    }
    if current is not None:
        values.update(
            concurrency=current.concurrency,
            rate_limit=current.rate_limit,
            rate_per_ms=current.rate_per_ms,
            paused=current.paused,
        )
    values.update(changes)
    if (values["rate_limit"] is None) != (values["rate_per_ms"] is None):
        raise ValueError("rate_limit and rate_per_ms are set and cleared together")
    if values["concurrency"] is None and values["rate_limit"] is None and not values["paused"]:
        return None
    return QueueSettingsRecord(
        queue,
        values["concurrency"],
        values["rate_limit"],
        values["rate_per_ms"],
        bool(values["paused"]),
        now_ms,
    )
