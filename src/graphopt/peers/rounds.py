"""Interleaved rounds: every variant timed in turn, round after round (chapter 7).

Load on a shared machine drifts; timing each variant once per round, in turn, lets
a drift hit all of them alike. Each round's median call time counts once, and a
variant is reported as the median of its rounds with their interquartile range: the
book's one spread convention (graphopt.measure.report), so two variants differ only
where their ranges do not overlap.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable


@dataclass
class Measured:
    """Median over rounds of each round's median call time, and their quartiles."""

    median: float
    low: float    # first quartile of the rounds
    high: float   # third quartile
    rounds: list[float]

    @property
    def spread(self) -> float:
        """Interquartile range / median (0.05 = 5 %)."""
        return (self.high - self.low) / self.median if self.median else 0.0

    def overlaps(self, other: "Measured") -> bool:
        """True when the two interquartile ranges overlap: within noise."""
        return self.low <= other.high and other.low <= self.high


def measured(rounds: list[float]) -> Measured:
    """The median and quartiles of per-round times (inclusive quartiles, as
    graphopt.measure computes them)."""
    if len(rounds) < 2:
        return Measured(rounds[0], rounds[0], rounds[0], list(rounds))
    q1, med, q3 = statistics.quantiles(rounds, n=4, method="inclusive")
    return Measured(med, q1, q3, list(rounds))


def interleave(timers: dict[str, Callable[[int], list[float]]], rounds: int,
               calls: int, settle_s: float = 0.0) -> dict[str, Measured]:
    """Round after round, time each variant in turn: load drifts hit all alike.

    `settle_s` seconds pass before each variant's round, so threads still spinning
    after the previous one (`waiting.py`) are asleep when the next one starts.
    """
    per_round: dict[str, list[float]] = {k: [] for k in timers}
    names = list(timers)
    for r in range(rounds):
        for i in range(len(names)):   # rotated each round: no variant always first
            name = names[(r + i) % len(names)]
            if settle_s:
                time.sleep(settle_s)
            per_round[name].append(statistics.median(timers[name](calls)))
    return {k: measured(v) for k, v in per_round.items()}
