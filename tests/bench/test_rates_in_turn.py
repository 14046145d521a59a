"""``bench store``'s figures taken in turn: the functions alternate call by call, each cycle starting
one further along, and a cost is the median of the rounds' own ratios."""

import pytest

from bench.store import cost_in_turn, rates_in_turn


def test_the_functions_take_turns_call_by_call_each_cycle_starting_one_further_along():
    # A clock that moves one second a call: a round of three functions, three seconds each, is
    # exactly three cycles, however busy the machine (on the real clock a stall of a few ms ended
    # a round after two cycles, and the next round started again at "a").
    order: list[str] = []
    now = [0.0]

    def one(name):
        def fn() -> int:
            order.append(name)
            now[0] += 1.0
            return 1

        return fn

    rates = rates_in_turn({"a": one("a"), "b": one("b"), "c": one("c")}, seconds=3, windows=3, clock=lambda: now[0])
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"] * 3
    assert rates == {"a": [1.0] * 3, "b": [1.0] * 3, "c": [1.0] * 3}  # one event a call, a second a call


def test_a_round_runs_each_function_at_least_once_however_short():
    calls = []
    rates = rates_in_turn({"slow": lambda: calls.append(1) or 5}, seconds=0.0, windows=2)
    assert len(calls) == 2
    assert len(rates["slow"]) == 2 and all(r > 0 for r in rates["slow"])


def test_cost_is_the_median_of_each_rounds_ratio():
    # Round by round the first is 10% slower, whatever the machine's speed in that round.
    rates = {"chained": [90.0, 45.0, 45.0, 900.0], "plain": [100.0, 50.0, 50.0, 1000.0]}
    assert cost_in_turn(rates, "chained", "plain") == pytest.approx(0.10)
    assert cost_in_turn({"x": [100.0, 120.0, 80.0], "y": [100.0, 100.0, 100.0]}, "x", "y") == pytest.approx(0.0)
