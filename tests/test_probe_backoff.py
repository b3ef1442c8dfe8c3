"""The probe's reconnect waits (probes/backoff.py): jittered, and never out of their bounds.

Unit tests with an injected ``rand(lo, hi)`` (exact waits) or a seeded generator (bounds over a
thousand waits), and the real agent against a port where nothing listens, recording what it
asked for."""

from __future__ import annotations

import itertools
import random

import pytest
from agent_helpers import TOKEN, FakeProgram, _free_port, fake_factory

from swarmscope.core.errors import FleetError
from swarmscope.probes.agent import ProbeAgent
from swarmscope.probes.backoff import Backoff


def test_waits_after_failed_rounds_grow_within_their_bounds() -> None:
    top = Backoff(0.25, 2.0, rand=lambda lo, hi: hi)  # always the top of the range
    assert [top.next(f) for f in range(1, 5)] == [0.75, 2.0, 2.0, 2.0]  # 3x the last, capped
    top.reset()
    assert top.next(1) == 0.75
    bottom = Backoff(0.25, 2.0, rand=lambda lo, hi: lo)
    assert [bottom.next(f) for f in range(1, 4)] == [0.25, 0.25, 0.25]
    # A rand that strays out of its range is clamped to [base, cap].
    assert Backoff(0.25, 2.0, rand=lambda lo, hi: -1.0).next(1) == 0.25
    assert Backoff(0.25, 2.0, rand=lambda lo, hi: 99.0).next(1) == 2.0


def test_moving_on_within_a_round_is_a_spread_of_up_to_base() -> None:
    asked: list[tuple[float, float]] = []

    def rand(lo: float, hi: float) -> float:
        asked.append((lo, hi))
        return hi

    waits = Backoff(0.25, 2.0, upstreams=3, rand=rand)
    assert [waits.next(f) for f in range(1, 7)] == [0.25, 0.25, 0.75, 0.25, 0.25, 2.0]
    assert asked == [(0.0, 0.25), (0.0, 0.25), (0.25, 0.75), (0.0, 0.25), (0.0, 0.25), (0.25, 2.25)]


def test_seeded_waits_are_spread_and_bounded() -> None:
    waits = Backoff(0.25, 2.0, upstreams=2, rand=random.Random(7).uniform)
    spread, rounds = [], []
    for f in range(1, 2001):
        w = waits.next(f)
        (rounds if f % 2 == 0 else spread).append(w)
    assert all(0.0 <= w <= 0.25 for w in spread)
    assert all(0.25 <= w <= 2.0 for w in rounds)
    assert all(b <= 3 * a for a, b in itertools.pairwise(rounds))
    # Spread, not one value: 1,000 probes waiting this way do not come back at one instant.
    # (Waits after a round that reach the cap are all 2.0; the others are all different.)
    below = [w for w in rounds if w < 2.0]
    assert len(set(spread)) == 1000 and len(set(below)) == len(below) > 300
    assert min(spread) < 0.01 and max(spread) > 0.24 and min(rounds) < 0.26 and max(rounds) == 2.0


def test_two_probes_draw_different_waits() -> None:
    one, two = Backoff(0.5, 8.0), Backoff(0.5, 8.0)
    assert [one.next(f) for f in range(1, 9)] != [two.next(f) for f in range(1, 9)]


def test_the_agent_waits_what_its_backoff_draws() -> None:
    asked: list[tuple[float, float]] = []

    def rand(lo: float, hi: float) -> float:
        asked.append((lo, hi))
        return lo

    dead = f"127.0.0.1:{_free_port()}"  # nothing listens on either
    agent = ProbeAgent(
        f"{dead},127.0.0.1:{_free_port()}",
        TOKEN,
        "n",
        ["f"],
        retries=2,
        backoff_s=0.25,
        max_backoff_s=2.0,
        rpc_timeout_s=1.0,
        program_factory=fake_factory({"f": FakeProgram("f")}),
        rand=rand,
    )
    with pytest.raises(FleetError, match="gave up after 2 retries"):
        agent.run_forever()
    # Two upstreams, two rounds: a spread before the second upstream, a wait after each round
    # (rand returns the bottom, 0.25, so the second round may wait up to 3 x 0.25).
    assert asked == [(0.0, 0.25), (0.25, 0.75), (0.0, 0.25), (0.25, 0.75)]
