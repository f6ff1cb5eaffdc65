"""The claim-ahead budget (`_runtime/ahead.py`) on a hand-driven clock."""

from __future__ import annotations

from jobledger._runtime.ahead import LAG_HIGH, LAG_LOW, ClaimAhead


class Tick:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_at_its_ceiling_the_budget_never_cuts_a_claim() -> None:
    ahead = ClaimAhead(50, Tick())
    # 50 may run at once; with 30 claimed and waiting, the caps leave 20 and so does it.
    for _ in range(30):
        ahead.claimed()
    assert ahead.limit(20) == 20
    assert not ahead.held


def test_a_loop_that_falls_behind_halves_the_budget_once_per_window() -> None:
    clock = Tick()
    ahead = ClaimAhead(64, clock)
    claims = [ahead.claimed() for _ in range(8)]
    clock.t += LAG_HIGH * 1.5
    for at in claims[:4]:  # four late starts inside one window: one cut
        ahead.started(at)
    assert ahead.budget == 32
    clock.t += LAG_HIGH * 1.5
    for at in claims[4:]:
        ahead.started(at)
    assert ahead.budget == 16
    assert ahead.unstarted == 0


def test_a_cut_claim_is_released_once_every_claimed_job_has_started() -> None:
    clock = Tick()
    ahead = ClaimAhead(4, clock)
    ahead.budget = 2.0
    first = ahead.claimed()
    ahead.claimed()
    assert ahead.limit(10) == 0  # two waiting already fill a budget of two
    assert ahead.held
    clock.t += (LAG_LOW + LAG_HIGH) / 2  # a start neither late nor prompt
    assert ahead.started(first) is False  # one still waits
    assert ahead.dropped() is True  # the other was cancelled before its first step
    assert ahead.limit(10) == 2


def test_prompt_starts_grow_the_budget_back_to_the_ceiling_and_no_further() -> None:
    clock = Tick()
    ahead = ClaimAhead(3, clock)
    ahead.budget = 1.0
    for _ in range(5):
        at = ahead.claimed()
        clock.t += LAG_LOW / 2
        ahead.started(at)
    assert ahead.budget == 3
    # Starts between the two bounds leave it alone.
    ahead.budget = 2.0
    at = ahead.claimed()
    clock.t += (LAG_LOW + LAG_HIGH) / 2
    ahead.started(at)
    assert ahead.budget == 2


def test_the_budget_never_drops_below_one_and_follows_a_lowered_ceiling() -> None:
    clock = Tick()
    ahead = ClaimAhead(8, clock)
    for _ in range(10):
        at = ahead.claimed()
        clock.t += LAG_HIGH * 2
        ahead.started(at)
    assert ahead.budget == 1
    assert ahead.limit(5) == 1
    ahead.budget = 8.0
    ahead.set_ceiling(2)
    assert ahead.budget == 2
