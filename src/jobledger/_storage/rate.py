"""The sliding window of a rate limit, on a backend's `rate_log` table.

Invariant: inside a claim's transaction (SQLite's `BEGIN IMMEDIATE`; on PostgreSQL under
the queue's advisory lock, which every claim of the queue takes), `window` counts the
bucket's starts in (now - per, now] exactly, and `record` logs the starts the claim took
before it commits, so no two claims can both spend the last start of a window. A row is
`(bucket, cum, at)`: `cum` is the bucket's starts up to and including that claim's, `at`
its time, never below the previous row's (so `at` grows with `cum`, and the one B-tree
keyed (bucket, at, cum) answers both "the newest row" and "the newest row at or before
t"). Rows older than the newest one at or before `now - per` are never needed again;
a claim deletes them once every PRUNE_EVERY starts of the bucket. `cum` counts from the
bucket's first row, so a window whose base row was deleted (a period made longer since)
counts every start the log still holds and more: it errs towards fewer starts, never
more.

A keyed limit's queue also keeps its own bucket (the queue's name), which counts every
start of the queue, so no key's window holds more than the queue's: while the queue's
window has room for all a claim may take, the claim reads no key's window and writes no
key's row, its starts per key left in the queue's row (`keys`, unfolded). A claim that
must read the keys' windows first folds the unfolded starts inside the window into the
keys' buckets (`fold`), so each key's window counts its starts from both kinds of claim.

The SQL is each dialect's (`RateSql`); the arithmetic is here, once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jobledger._storage import layout as L

__all__ = [
    "KeyedPick",
    "RateSql",
    "SpreadWindows",
    "Window",
    "bucket_of",
    "fold",
    "keyed_wait",
    "pick_keyed",
    "rate_key_marks",
    "record",
    "record_many",
    "record_spread",
    "record_total",
    "spread_windows",
    "window",
    "windows",
]

# Between a queue's name and a key in a keyed bucket's name: neither may hold a control
# character (`_core/limits.py`), so no two (queue, key) pairs share a bucket.
SEP = "\x1f"


PRUNE_EVERY = 32


def bucket_of(queue: str, key: str | None) -> str:
    """The bucket of a queue's unkeyed limit (`key` None) or of one key of a keyed one."""
    return queue if key is None else f"{queue}{SEP}{key}"


Execute = Callable[[str, Sequence[Any]], list[Any]]


@dataclass(frozen=True, slots=True)
class RateSql:
    latest: str  # (bucket) -> cum, at of the newest row
    base: str  # (bucket, t) -> cum of the newest row with at <= t
    first_after: str  # (bucket, c) -> at of the oldest row with cum > c
    insert: str  # (bucket, cum, at)
    prune: str  # (bucket, t, c): delete rows with at <= t and cum < c
    # (buckets, t) -> bucket, newest cum, newest at, cum of the newest row with at <= t,
    # for many buckets in one statement (keyed limits); each dialect spells the list.
    many: str = ""
    # (bucket, cum, at, keys): a keyed queue's own row with each key's starts unfolded
    insert_keys: str = ""
    # (bucket, t) -> at, keys of the unfolded rows after t, oldest first
    unfolded: str = ""
    # (bucket, t): the rows `unfolded` read are folded
    mark_folded: str = ""

    @classmethod
    def for_placeholder(
        cls, ph: str, table: str = "rate_log", listed: str = "", unfolded_hint: str = ""
    ) -> RateSql:
        """`listed`: the FROM item that makes rows `k(value)` of a list parameter;
        `unfolded_hint`: what follows the table's name where a fold reads and marks its
        rows (SQLite's `INDEXED BY`: see the partial index of migration 0010)."""
        unfolded_from = f"{table} {unfolded_hint}".rstrip()
        many = (
            f"SELECT k.value, (SELECT cum FROM {table} WHERE bucket = k.value "
            f"ORDER BY at DESC, cum DESC LIMIT 1), (SELECT at FROM {table} WHERE bucket = "
            f"k.value ORDER BY at DESC, cum DESC LIMIT 1), (SELECT cum FROM {table} WHERE "
            f"bucket = k.value AND at <= {ph} ORDER BY at DESC, cum DESC LIMIT 1) FROM {listed}"
            if listed
            else ""
        )
        return cls(
            many=many,
            insert_keys=(
                f"INSERT INTO {table} (bucket, cum, at, keys) VALUES ({ph}, {ph}, {ph}, {ph})"
            ),
            unfolded=(
                f"SELECT at, keys FROM {unfolded_from} WHERE bucket = {ph} AND at > {ph} "
                "AND keys IS NOT NULL ORDER BY at, cum"
            ),
            mark_folded=(
                f"UPDATE {unfolded_from} SET keys = NULL WHERE bucket = {ph} AND at > {ph} "
                "AND keys IS NOT NULL"
            ),
            latest=(
                f"SELECT cum, at FROM {table} WHERE bucket = {ph} "
                "ORDER BY at DESC, cum DESC LIMIT 1"
            ),
            base=(
                f"SELECT cum FROM {table} WHERE bucket = {ph} AND at <= {ph} "
                "ORDER BY at DESC, cum DESC LIMIT 1"
            ),
            # Rows older than the window's base are pruned, so this scans the window's.
            first_after=(
                f"SELECT at FROM {table} WHERE bucket = {ph} AND cum > {ph} "
                "ORDER BY at, cum LIMIT 1"
            ),
            insert=f"INSERT INTO {table} (bucket, cum, at) VALUES ({ph}, {ph}, {ph})",
            # Bounded by `at` too, so the delete reads only the rows it removes.
            prune=f"DELETE FROM {table} WHERE bucket = {ph} AND at <= {ph} AND cum < {ph}",
        )


@dataclass(frozen=True, slots=True)
class Window:
    room: int  # starts allowed now
    wait_until: int | None  # when room is 0: the epoch ms the next start is allowed
    cum: int  # the newest row's cum (0: none)
    at: int  # the newest row's at
    base: int  # cum of the newest row at or before now - per (0: none)
    edge: int = 0  # now - per: the base row's at is at or before it


def window(
    ex: Execute,
    sql: RateSql,
    bucket: str,
    limit: int,
    per_ms: int,
    now_ms: int,
    *,
    wait: bool = True,
) -> Window:
    """The bucket's window; `wait` False: a spent one's `wait_until` is not read (None)."""
    latest = ex(sql.latest, (bucket,))
    if not latest:
        return Window(limit, None, 0, 0, 0, now_ms - per_ms)
    cum, at = int(latest[0][0]), int(latest[0][1])
    base_rows = ex(sql.base, (bucket, now_ms - per_ms))
    base = int(base_rows[0][0]) if base_rows else 0
    room = limit - (cum - base)
    if room > 0 or not wait:
        return Window(room, None, cum, at, base, now_ms - per_ms)
    # The next start is allowed once the oldest start that keeps the window full has
    # left it: the first row whose cum exceeds cum - limit, `per` after its time.
    first = ex(sql.first_after, (bucket, cum - limit))
    until = int(first[0][0]) + per_ms if first else now_ms + per_ms
    return Window(0, max(until, now_ms + 1), cum, at, base, now_ms - per_ms)


def windows(
    ex: Execute,
    sql: RateSql,
    buckets: Sequence[str],
    limit: int,
    per_ms: int,
    now_ms: int,
    listed: Any,
) -> dict[str, Window]:
    """`window` of many buckets: one statement, then one more per full bucket (for its
    wait). `listed` is the buckets as the dialect's list parameter."""
    out: dict[str, Window] = {}
    for bucket, cum, at, base in ex(sql.many, (now_ms - per_ms, listed)):
        if cum is None:
            out[bucket] = Window(limit, None, 0, 0, 0, now_ms - per_ms)
            continue
        cum, at, base = int(cum), int(at), 0 if base is None else int(base)
        room = limit - (cum - base)
        if room > 0:
            out[bucket] = Window(room, None, cum, at, base, now_ms - per_ms)
            continue
        first = ex(sql.first_after, (bucket, cum - limit))
        wait = int(first[0][0]) + per_ms if first else now_ms + per_ms
        out[bucket] = Window(0, max(wait, now_ms + 1), cum, at, base, now_ms - per_ms)
    return out


def record(
    ex: Execute,
    sql: RateSql,
    bucket: str,
    w: Window,
    taken: int,
    now_ms: int,
    keys: str | None = None,
) -> None:
    """Log `taken` starts in the bucket whose window `w` is; `keys`: a keyed queue's
    starts per key, as JSON, left unfolded in its own row (`record_total`)."""
    if taken <= 0:
        return
    if keys is None:
        ex(sql.insert, (bucket, w.cum + taken, max(now_ms, w.at)))
    else:
        ex(sql.insert_keys, (bucket, w.cum + taken, max(now_ms, w.at), keys))
    if w.base and (w.cum + taken) // PRUNE_EVERY != w.cum // PRUNE_EVERY:
        ex(sql.prune, (bucket, w.edge, w.base))


def record_many(
    exmany: Callable[[str, list[tuple[Any, ...]]], object],
    sql: RateSql,
    taken: dict[str, tuple[Window, int]],
    now_ms: int,
) -> None:
    """`record` for many buckets (their window and the starts the claim took), as one
    batch of inserts and one of deletes (`exmany`: the dialect's executemany)."""
    rows = [(b, w.cum + n, max(now_ms, w.at)) for b, (w, n) in taken.items() if n > 0]
    if rows:
        exmany(sql.insert, rows)
    # Rows older than a bucket's base are never read again, but deleting them on every
    # claim cost as much as logging: they go once every PRUNE_EVERY starts of the bucket.
    prune = [
        (b, w.edge, w.base)
        for b, (w, n) in taken.items()
        if n > 0 and w.base and (w.cum + n) // PRUNE_EVERY != w.cum // PRUNE_EVERY
    ]
    if prune:
        exmany(sql.prune, prune)


def record_total(
    ex: Execute, sql: RateSql, queue: str, w: Window, keys: Sequence[str], now_ms: int
) -> None:
    """`record` of a keyed queue's own bucket for a claim that took rows of `keys` (one
    per row) without reading their windows: the row holds each key's starts, unfolded
    (`fold` moves them into the keys' buckets when a claim next reads those)."""
    counts: dict[str, int] = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    record(ex, sql, queue, w, len(keys), now_ms, json.dumps(counts))


def fold(
    ex: Execute,
    exmany: Callable[[str, list[tuple[Any, ...]]], object],
    sql: RateSql,
    queue: str,
    per_ms: int,
    now_ms: int,
    listed: Callable[[list[str]], Any],
) -> None:
    """Move the keyed queue's unfolded starts inside the window into their keys' buckets,
    oldest first, each at its own time or its bucket's newest if later (a row never goes
    before its bucket's newest: it would count longer, never shorter). Starts at or
    before the window's edge stay out: no later window reaches them while `per` holds."""
    edge = now_ms - per_ms
    rows = ex(sql.unfolded, (queue, edge))
    if not rows:
        return
    seq = [
        (bucket_of(queue, k), int(n), int(at)) for at, ks in rows for k, n in json.loads(ks).items()
    ]
    heads: dict[str, tuple[int, int]] = {}
    for bucket, cum, at, _ in ex(sql.many, (edge, listed(sorted({b for b, _, _ in seq})))):
        heads[bucket] = (0, 0) if cum is None else (int(cum), int(at))
    out: list[tuple[Any, ...]] = []
    for bucket, n, at in seq:
        cum, head_at = heads[bucket]
        heads[bucket] = (cum + n, max(at, head_at))
        out.append((bucket, *heads[bucket]))
    exmany(sql.insert, out)
    ex(sql.mark_folded, (queue, edge))


# Candidate rows a keyed claim reads per round, beyond what it may take: rows of keys
# whose window is spent are skipped (and their keys left out of the next round).
KEYED_SLACK = 32
KEYED_ROUNDS = 4


@dataclass(frozen=True, slots=True)
class KeyedPick:
    ids: list[Any]  # the rows to claim, in claim order
    # Each key's window as read, and the starts taken from it.
    wins: dict[str, Window]
    taken: dict[str, int]
    spent: list[str]  # keys found with rows waiting and no room


def pick_keyed(
    candidates: Callable[[list[str], int], list[Any]],
    read_windows: Callable[[list[str]], dict[str, Window]],
    n: int,
) -> KeyedPick:
    """A keyed rate limit's choice, once for both backends: up to `n` rows of the queue's
    head in claim order, each while its key's window has room. `candidates(spent,
    want)` reads up to `want` head rows `(id, key)` whose key is not in `spent`, so a
    spent key's backlog at the head does not hide the other keys' rows behind it;
    `read_windows(keys)` reads those keys' windows (one statement). Windows are read only
    for the keys of rows the claim may still take, not for every row read ahead."""
    wins: dict[str, Window] = {}
    spent: list[str] = []
    taken: dict[str, int] = {}
    picked: list[Any] = []
    seen: set[Any] = set()
    for _ in range(KEYED_ROUNDS):
        want = n - len(picked) + KEYED_SLACK
        cand = candidates(spent, want)
        newly: set[str] = set()
        for i, (row_id, key) in enumerate(cand):
            if row_id in seen:
                continue
            seen.add(row_id)
            if key not in wins:
                ahead = cand[i : i + n - len(picked)]
                wins.update(read_windows(sorted({k for _, k in ahead if k not in wins})))
            got = taken.get(key, 0)
            if got < wins[key].room:
                taken[key] = got + 1
                picked.append(row_id)
                if len(picked) >= n:
                    break
            else:
                newly.add(key)
        spent.extend(k for k in sorted(newly) if k not in spent)
        if len(picked) >= n or len(cand) < want:
            break
    return KeyedPick(picked, wins, taken, spent)


def keyed_wait(
    ex: Execute, sql: RateSql, queue: str, pick: KeyedPick, limits: tuple[int, int], now_ms: int
) -> int | None:
    """After a keyed claim recorded its starts: the earliest time a key with rows waiting
    (spent before, or spent by this claim) may start again; None: none waits."""
    waits = [w.wait_until for k, w in pick.wins.items() if k in pick.spent and w.wait_until]
    for k, c in pick.taken.items():
        if c >= pick.wins[k].room:
            after = window(ex, sql, bucket_of(queue, k), *limits, now_ms)
            if after.wait_until is not None:
                waits.append(after.wait_until)
    return min(waits) if waits else None


def rate_key_marks(
    rows: Sequence[Any], out: Sequence[Any], keys: Sequence[str | None]
) -> list[tuple[str, str]]:
    """(key, id) of each job that now holds an entry's payload after an enqueue: the
    entry inserted, or a debounced job whose payload it replaced. A job answered
    unchanged with the same payload has the same key already (the key is a function of
    the payload)."""
    return [
        (key, got[L.C_ID])
        for new, got, key in zip(rows, out, keys, strict=True)
        if key is not None and got[L.C_PAYLOAD] == new[L.C_PAYLOAD]
    ]


@dataclass(slots=True)
class SpreadWindows:
    """A spread claim's rate limits, counted before its statement: what each asked queue
    may take (its free slots; 0 when paused or its window is spent; at most its window's
    room), the windows read, and when each spent queue may start again."""

    may: dict[str, int]
    windows: dict[str, Window]
    waits: dict[str, int]
    rates: dict[str, tuple[int, int]]


def spread_windows(
    ex: Execute,
    sql: RateSql,
    free: dict[str, int],
    paused: Collection[str],
    rates: dict[str, tuple[int, int]],
    now_ms: int,
) -> SpreadWindows:
    may: dict[str, int] = {}
    windows: dict[str, Window] = {}
    waits: dict[str, int] = {}
    for name, f in free.items():
        if name in paused:
            f = 0
        elif name in rates and f > 0:
            win = window(ex, sql, name, *rates[name], now_ms)
            if win.room <= 0 and win.wait_until is not None:
                waits[name] = win.wait_until
                f = 0
            else:
                windows[name] = win
                f = min(f, win.room)
        may[name] = max(f, 0)
    return SpreadWindows(may, windows, waits, rates)


def record_spread(
    ex: Execute, sql: RateSql, plan: SpreadWindows, taken: Mapping[str, int], now_ms: int
) -> None:
    """Log the starts a spread claim took per rate-limited queue; a queue it spent gets
    its wait in `plan.waits`."""
    for name, win in plan.windows.items():
        got = taken.get(name, 0)
        record(ex, sql, name, win, got, now_ms)
        if got and got >= win.room:
            after = window(ex, sql, name, *plan.rates[name], now_ms)
            if after.wait_until is not None:
                plan.waits[name] = after.wait_until
