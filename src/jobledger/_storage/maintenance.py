"""Maintenance around a database that is not a row operation, by backend.

For the CLI's `doctor`, which must not know a dialect: a WAL checkpoint (SQLite only; a
server manages its own log) and the processes still writing to a deleted database file
(a file's failure; a server has none).
"""

from __future__ import annotations

from jobledger._storage.observe import CheckpointResult
from jobledger._storage.open import is_postgres_url

__all__ = ["checkpoint", "unlinked_holders"]


def checkpoint(path: str) -> CheckpointResult | None:
    """A TRUNCATE checkpoint of the SQLite file at `path`; None for a PostgreSQL URL."""
    if is_postgres_url(path):
        return None
    from jobledger._storage.sqlite import observe

    return observe.checkpoint(path)


def unlinked_holders(path: str) -> list[int]:
    """Pids of this host's processes writing to a deleted file that was at `path`."""
    if is_postgres_url(path):
        return []
    from jobledger._storage.sqlite.files import unlinked_holders as holders

    return holders(path)
