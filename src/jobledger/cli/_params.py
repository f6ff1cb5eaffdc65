"""Option types with every bound the layers below need, so a bad value is a usage error.

click's `FloatRange` lets `nan` and `inf` through (no comparison with them is true) and
its `IntRange` without a maximum lets integers through that SQLite cannot store; both
used to surface as `OverflowError`/`ValueError` from deep inside, exit 1. Here they are
refused while parsing: `Invalid value for '--x': ...`, exit 2 (click's convention).
"""

from __future__ import annotations

import math
from typing import Any

import click

from jobledger._observe.read_model import parse_statuses

__all__ = [
    "INT_MAX",
    "MAX_SECONDS",
    "OFFSET_MAX",
    "STATUSES_OPTION",
    "Seconds",
    "bounded_int",
    "terminal_statuses",
]

# The library's bound on priorities (`_runtime/enqueue.py`), well inside SQLite's int64.
INT_MAX = 2**62
# The HTTP API's bound on `offset` (`_observe/http.py`).
OFFSET_MAX = 10**18 - 1
# About 317 years: any span of time an option means, still a valid epoch millisecond.
MAX_SECONDS = 1e10


class Seconds(click.FloatRange):
    """A finite number of seconds within [min, max]."""

    name = "seconds"

    def __init__(self, min: float = 0.0, max: float = MAX_SECONDS) -> None:
        super().__init__(min=min, max=max)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if isinstance(rv, float) and not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number of seconds.", param, ctx)
        return rv


def bounded_int(min: int, max: int = INT_MAX) -> click.IntRange:
    return click.IntRange(min=min, max=max)


def _statuses(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...]:
    try:
        return parse_statuses(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def terminal_statuses(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[str, ...]:
    """`_statuses`, refusing any status a job can still leave (`jobs retry --status`)."""
    statuses = _statuses(ctx, param, value)
    live = [s for s in statuses if s not in ("completed", "failed", "cancelled")]
    if live:
        raise click.BadParameter(
            f"{', '.join(live)} is not a finished status (completed, failed, cancelled)",
            ctx,
            param,
        )
    return statuses


STATUSES_OPTION = click.option(
    "--status",
    "statuses",
    default=None,
    callback=_statuses,
    help="Comma list, e.g. pending,running.",
)
