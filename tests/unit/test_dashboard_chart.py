"""The overview's throughput chart: stacked per-minute bars on a 1-2-5 axis, as SVG
geometry computed on the server (`dashboard.throughput_chart`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobledger._observe.dashboard import axis_top, throughput_chart

T0 = datetime(2026, 3, 1, 11, 58, tzinfo=UTC)


@pytest.mark.parametrize(
    ("n", "top"), [(0, 1), (1, 1), (2, 2), (3, 5), (7, 10), (11, 20), (50, 50), (101, 200)]
)
def test_the_axis_top_is_one_two_or_five_times_a_power_of_ten(n: int, top: int) -> None:
    assert axis_top(n) == top


def test_bars_stack_failed_on_completed_and_scale_to_the_axis() -> None:
    series = [
        (T0 + timedelta(minutes=i), c, f) for i, (c, f) in enumerate([(0, 0), (6, 2), (3, 0)])
    ]
    chart = throughput_chart(series)
    assert (chart.completed, chart.failed) == (9, 2)
    assert [t["label"] for t in chart.y_ticks] == ["0", "5", "10"]  # 8 at most -> 10
    base = chart.top + chart.plot_h
    empty, busy, quiet = chart.bars
    assert (empty.h_completed, empty.h_failed) == (0, 0)
    assert busy.h_completed == pytest.approx(0.6 * chart.plot_h, abs=0.1)
    assert busy.h_failed == pytest.approx(0.2 * chart.plot_h, abs=0.1)
    assert busy.y_completed + busy.h_completed == pytest.approx(base, abs=0.1)
    assert busy.y_failed + busy.h_failed == pytest.approx(busy.y_completed, abs=0.1)
    assert empty.x < busy.x < quiet.x
    assert busy.label == "11:59 UTC"
    # A tick under each minute that is a multiple of ten.
    assert [t["label"] for t in chart.x_ticks] == ["12:00"]


def test_an_idle_hour_draws_an_empty_chart() -> None:
    chart = throughput_chart([(T0 + timedelta(minutes=i), 0, 0) for i in range(60)])
    assert len(chart.bars) == 60
    assert all(b.h_completed == b.h_failed == 0 for b in chart.bars)
    assert [t["label"] for t in chart.y_ticks] == ["0", "1"]
