"""Interleaved rounds: every variant timed in turn, round after round (chapter 7).

Load on a shared machine drifts; timing each variant once per round, in turn, lets
a drift hit all of them alike. Each round's median call time counts once.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable


@dataclass
class Measured:
    """Median over rounds of each round's median call time, and the spread of rounds."""

    median: float
    low: float
    high: float
    rounds: list[float]

    @property
    def spread(self) -> float:
        """(slowest round - fastest round) / median."""
        return (self.high - self.low) / self.median if self.median else 0.0


def interleave(timers: dict[str, Callable[[int], list[float]]], rounds: int,
               calls: int, settle_s: float = 0.0) -> dict[str, Measured]:
    """Round after round, time each variant in turn: load drifts hit all alike.

    `settle_s` seconds pass before each variant's round, so threads still spinning
    after the previous one (`waiting.py`) are asleep when the next one starts.
    """
    per_round: dict[str, list[float]] = {k: [] for k in timers}
    for _ in range(rounds):
        for name, timer in timers.items():
            if settle_s:
                time.sleep(settle_s)
            per_round[name].append(statistics.median(timer(calls)))
    return {k: Measured(statistics.median(v), min(v), max(v), v)
            for k, v in per_round.items()}
