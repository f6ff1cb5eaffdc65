"""Job ids to rowids (schema 4).

A row's rowid is its id's row key (`ids.row_key`), so a lookup by id reads the table by
rowid and `jobs.id` needs no index. Rows written before schema 4 keep their ids under
negative rowids, found through `jobs_legacy_id_idx`. Every statement that finds a row by
key also compares the id itself: a key says where to look, the id says whether it is
the row asked for (a string that is not a job id of this file can still parse to a key).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from jobledger._core.ids import row_key

__all__ = ["NO_ROW", "ROWID_KEY_VERSION", "key_of", "keys_of"]

ROWID_KEY_VERSION = 4  # the schema from which a rowid is its job id's key
NO_ROW = -(1 << 63)  # below every rowid the migration gives (-2**62 and up)
_LEGACY_KEY = "SELECT rowid FROM jobs WHERE id = ? AND rowid < 0"
_LEGACY_KEYS = "SELECT id, rowid FROM jobs WHERE rowid < 0 AND id IN ({marks})"


def key_of(conn: sqlite3.Connection, job_id: str) -> int:
    """The rowid to look `job_id` up under; `NO_ROW` when no row can have it."""
    key = row_key(job_id)
    if key is not None:
        return key
    row = conn.execute(_LEGACY_KEY, (job_id,)).fetchone()
    return NO_ROW if row is None else int(row[0])


def keys_of(conn: sqlite3.Connection, job_ids: Sequence[str]) -> list[int]:
    """`key_of` of each id, in order, with one query for all the legacy ones."""
    keys = list(map(row_key, job_ids))
    if None not in keys:
        return keys  # type: ignore[return-value]  # no None in it
    legacy = [i for i, k in zip(job_ids, keys, strict=True) if k is None]
    found: dict[str, int] = {}
    for start in range(0, len(legacy), 500):
        chunk = legacy[start : start + 500]
        sql = _LEGACY_KEYS.format(marks=",".join("?" * len(chunk)))
        found.update(conn.execute(sql, chunk).fetchall())
    return [found.get(i, NO_ROW) if k is None else k for i, k in zip(job_ids, keys, strict=True)]
