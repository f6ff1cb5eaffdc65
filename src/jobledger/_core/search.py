"""The job search of the console (`jobs.list(search=...)`, `GET /api/jobs?q=`, DESIGN.md
§8.9): one term, parsed before any query.

Forms:

* `payload.FIELD:VALUE`, `metadata.FIELD:VALUE`: the JSON value at FIELD (dots go
  deeper: `payload.user.id:7`) equals VALUE, compared as text (`7` matches the number 7
  and the string "7"; `true`/`false` match booleans);
* `CODE`, all capitals, digits and underscores with one underscore at least
  (`JOB_HANDLER_TIMEOUT`, `CARD_DECLINED`): the job's error has that code;
* anything else: a job id, or the start of one (at least 4 characters).

Invariants: a term that fits no form, or holds a control character, is
`JOB_INVALID_OPTION` and nothing is read; a FIELD is 1-20 segments of `[A-Za-z0-9_-]`,
so the backends' JSON paths are built from checked names only, and may be spliced into
SQL as literals (which a search index needs: an index on an expression serves only a
query that spells the same expression, its path included).

A search index (`jobs.add_search_index("payload.user")`) names a field the same way,
without a value: `parse_search_field`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from jobledger._core.limits import has_surrogate
from jobledger.errors import JobValidationError

__all__ = ["Search", "SearchField", "parse_search", "parse_search_field"]

SearchKind = Literal["id", "error", "payload", "metadata"]
FieldKind = Literal["payload", "metadata"]
_SEGMENT = re.compile(r"[A-Za-z0-9_-]{1,100}")
_MAX_FIELD = 200  # a search index's field: its name is stored and shown
_CODE = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
_MAX = 500


@dataclass(frozen=True, slots=True)
class Search:
    """A parsed term: `kind`, the field's path (JSON kinds), and the value to match."""

    kind: SearchKind
    value: str
    path: tuple[str, ...] = ()

    def like_prefix(self) -> str:
        """An `id` term as a LIKE pattern (escape character `\\`): the prefix, its
        wildcards escaped, then `%`."""
        escaped = self.value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return escaped + "%"

    def text(self) -> str:
        """The term as typed (what `parse_search` reads back to this)."""
        if self.kind in ("payload", "metadata"):
            return f"{self.kind}.{'.'.join(self.path)}:{self.value}"
        return self.value

    @property
    def field(self) -> SearchField | None:
        """The JSON field a `payload`/`metadata` term compares; None for the others."""
        if self.kind == "payload" or self.kind == "metadata":
            return SearchField(self.kind, self.path)
        return None


@dataclass(frozen=True, slots=True)
class SearchField:
    """A JSON field of the jobs' `payload` or `metadata`: what a search index covers."""

    kind: FieldKind
    path: tuple[str, ...]

    @property
    def name(self) -> str:
        """`payload.user.id`: as typed, and as stored in the index registry."""
        return f"{self.kind}.{'.'.join(self.path)}"


def _invalid(q: object, why: str) -> JobValidationError:
    return JobValidationError(
        f"search {q!r}: {why}", code="JOB_INVALID_OPTION", params={"q": repr(q)[:200]}
    )


def parse_search_field(text: object) -> SearchField:
    """`payload.FIELD` or `metadata.FIELD` (no value) as a `SearchField`, or
    `JOB_INVALID_OPTION`."""
    for kind in ("payload", "metadata"):
        if isinstance(text, str) and text.startswith(kind + "."):
            path = tuple(text[len(kind) + 1 :].split("."))
            if (
                len(text) <= _MAX_FIELD
                and 1 <= len(path) <= 20
                and all(map(_SEGMENT.fullmatch, path))
            ):
                return SearchField(kind, path)
    raise JobValidationError(
        f"search field {text!r}: write payload.FIELD or metadata.FIELD, FIELD of letters, "
        f"digits, _ and - (dots go deeper), {_MAX_FIELD} characters at most",
        code="JOB_INVALID_OPTION",
        params={"field": repr(text)[:200]},
    )


def parse_search(q: object) -> Search:
    """The term `q` as a `Search`, or `JOB_INVALID_OPTION`."""
    if not isinstance(q, str):
        raise _invalid(q, "a search is a string")
    text = q.strip()
    if not text or len(text) > _MAX:
        raise _invalid(q, f"a search is 1 to {_MAX} characters")
    if has_surrogate(text) or any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise _invalid(q, "a search holds no control characters")
    for kind in ("payload", "metadata"):
        if text.startswith(kind + "."):
            field, sep, value = text[len(kind) + 1 :].partition(":")
            path = tuple(field.split("."))
            if not sep or not 1 <= len(path) <= 20 or not all(map(_SEGMENT.fullmatch, path)):
                raise _invalid(q, f"write {kind}.FIELD:VALUE, FIELD of letters, digits, _ and -")
            return Search(kind, value, path)
    if _CODE.fullmatch(text):
        return Search("error", text)
    if len(text) < 4:
        raise _invalid(q, "a job id prefix has 4 characters at least")
    return Search("id", text)
