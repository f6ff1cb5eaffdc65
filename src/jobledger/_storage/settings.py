"""Merging an operator's change into a queue's settings (`queue_settings`), once for
every backend: each store reads the row and writes what this returns in one write
transaction, so two changes to different fields from two processes both hold."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jobledger._storage.observe import QueueCounts, QueueSettingsRecord

__all__ = ["FIELDS", "by_queue", "merged", "overlay", "record_of"]

FIELDS = ("concurrency", "rate_limit", "rate_per_ms", "paused")


def record_of(queue: str, row: Sequence[Any]) -> QueueSettingsRecord:
    """The record of a row `(concurrency, rate_limit, rate_per_ms, paused, updated_at)`,
    as every backend selects them."""
    conc, limit, per, paused, updated = row

    def opt(v: Any) -> int | None:
        return None if v is None else int(v)

    return QueueSettingsRecord(queue, opt(conc), opt(limit), opt(per), bool(paused), int(updated))


def by_queue(
    counts: Iterable[QueueCounts], records: Iterable[QueueSettingsRecord]
) -> list[tuple[str, QueueCounts | None, QueueSettingsRecord | None]]:
    """Every queue that has counts or settings, by name, with each (None: none)."""
    by_count = {c.name: c for c in counts}
    by_setting = {r.queue: r for r in records}
    return [
        (name, by_count.get(name), by_setting.get(name))
        for name in sorted(by_count.keys() | by_setting.keys())
    ]


def overlay(
    caps: dict[str, int], rates: dict[str, tuple[int, int]], rows: Iterable[Sequence[Any]]
) -> list[str]:
    """Apply settings rows `(queue, concurrency, paused, rate_limit, rate_per_ms)` over
    the handlers' caps and rates (in place); returns the paused queues."""
    paused: list[str] = []
    for name, cap, is_paused, limit, per in rows:
        if cap is not None:
            caps[name] = int(cap)
        if limit is not None:
            rates[name] = (int(limit), int(per))
        if is_paused:
            paused.append(name)
    return paused


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
