"""Tests of the storage layer's files, leases and schema on real SQLite files."""

from __future__ import annotations

import uuid


def v7_id(ms: int, n: int) -> str:
    """An id as versions before schema 4 made them (UUIDv7, a counter at the end)."""
    return str(uuid.UUID(int=ms << 80 | 0x7 << 76 | 0x123 << 64 | 0b10 << 62 | n))
