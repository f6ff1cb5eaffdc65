"""The rule `terminal_row` rests on (src/jobledger/_storage/sqlite/store.py): no statement
changes a column it takes from the claim (`queries.FROM_THE_CLAIM`) on a running row.

Every `UPDATE jobs SET` in the SQLite store's SQL (its modules and its schema's
triggers) that assigns such a column must be one reviewed here, with the condition that
keeps it off running rows still in its text. A new one fails this test until its author
either keeps it off running rows or moves the column to `queries.FINISHED_PARTS`, which
the finalize reads back instead."""

from __future__ import annotations

import re
from pathlib import Path

from jobledger._storage.layout import JOB_COLUMNS
from jobledger._storage.sqlite import queries as q

SRC = Path(__file__).resolve().parents[2] / "src" / "jobledger" / "_storage"

# The statement's opening, and the text in it that keeps it off running rows.
REVIEWED = {
    # debounce: a waiting job takes the new payload and time, never a running one
    "UPDATE jobs SET payload = ?1, status = ?2, scheduled_at = ?3": "AND status <> 'running'",
    # a retry is the running attempt's own fenced outcome: it ends that claim
    "UPDATE jobs SET status = 'delayed', attempt = attempt + 1": "{_FENCE}",
    # a deleted schedule's held-back fire, and the trigger releasing the next one
    "UPDATE jobs SET status = 'pending', scheduled_at = min(scheduled_at, ?)": (
        "status = 'waiting'"
    ),
    "UPDATE jobs SET status = 'pending', scheduled_at = min(scheduled_at, new.updated_at)": (
        "status = 'waiting'"
    ),
}


def _statements() -> list[tuple[str, str]]:
    """(file, text) of each `UPDATE jobs SET` up to the end of its string or statement,
    Python string pieces joined so a statement split over lines reads whole."""
    found: list[tuple[str, str]] = []
    files = [*sorted(SRC.glob("*.py")), *sorted((SRC / "sqlite").glob("*.py"))]
    files.append(SRC / "sqlite" / "schema.sql")
    for path in files:
        text = path.read_text()
        if path.suffix == ".py":
            # Adjacent string literals: drop the quotes and line breaks between them.
            text = re.sub(r"\"\s*\n\s*f?\"", "", text)
        for m in re.finditer(r"UPDATE jobs SET .*?(?:;|\"\s*$|\)\s*$)", text, re.S | re.M):
            found.append((path.name, m.group(0)))
    return found


def _assigned(statement: str) -> set[str]:
    head = re.split(r"\bWHERE\b|\bFROM\b", statement, maxsplit=1)[0]
    return set(re.findall(r"\b(\w+)\s*=(?!=)", head.removeprefix("UPDATE jobs SET ")))


def test_no_statement_moves_a_column_taken_from_the_claim_on_a_running_row() -> None:
    statements = _statements()
    assert len(statements) > 20  # the scan reads the store's SQL at all
    touching = [(f, s) for f, s in statements if _assigned(s) & set(q.FROM_THE_CLAIM)]
    unreviewed = [(f, s[:90]) for f, s in touching if not any(s.startswith(k) for k in REVIEWED)]
    assert unreviewed == [], (
        "a statement assigns a column terminal_row takes from the claim; keep it off "
        "running rows and review it here, or read the column back (FINISHED_PARTS)"
    )
    for opening, guard in REVIEWED.items():
        matches = [s for _, s in touching if s.startswith(opening)]
        assert matches, f"reviewed statement not found any more: {opening}"
        assert all(guard in s for s in matches), f"{opening} lost its guard {guard!r}"


def test_the_claim_and_the_read_back_cover_every_column_once() -> None:
    # The finalize's own writes and the fence's columns, neither claimed nor read back.
    own = {"status", "output", "error", "attempt", "worker_id", "finished_at", "updated_at"}
    columns = JOB_COLUMNS.split(", ")
    parts = [*q.FINISHED_PARTS, *q.FROM_THE_CLAIM, *own]
    assert sorted(parts) == sorted(columns)
