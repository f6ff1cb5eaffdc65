"""The names of search indexes (`jobs.add_search_index`), the same on both backends.

Invariants: a field's index is `jobs_search_<hex>`, from a hash of the field's name, so
any checked field has a valid name within PostgreSQL's 63 bytes, the same in every
process; a name read back from the registry (`search_indexes.index_name`) is spliced
into a DROP only after `checked_index_name` found it one of ours.
"""

from __future__ import annotations

import hashlib
import re

from jobledger._core.search import SearchField
from jobledger.errors import StorageError

__all__ = ["checked_index_name", "index_name"]

_NAME = re.compile(r"jobs_search_[0-9a-f]{1,48}")


def index_name(field: SearchField) -> str:
    return "jobs_search_" + hashlib.sha256(field.name.encode()).hexdigest()[:16]


def checked_index_name(name: str) -> str:
    """`name` (an index keeps the name it was built with), refused unless it is ours."""
    if not _NAME.fullmatch(name):
        raise StorageError(f"search_indexes names an index that is not one of ours: {name!r}")
    return name
