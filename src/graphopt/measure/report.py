"""What a measurement reports: `Timing` (median and spread) and `Comparison` (ch. 6).

A time is never one number: it is the median of rounds with its interquartile range,
and two timings whose ranges overlap are within noise: the book's one spread
convention, used by every chapter, the explorer and the benchmarks.
`Comparison.verdict` turns that into the sentence a notebook prints, so the prose
follows from the numbers.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from ..i18n import N_, _, ngettext
from .conditions import describe

# The words a check finds in a verdict in either language: `_("within noise") in
# cmp.verdict(a, b)` (each sentence below holds its word in every translation).
VERDICT_WORDS = (N_("within noise"), N_("faster"), N_("slower"))


@dataclass
class Timing:
    """Median and spread of repeated runs of one function (seconds per call)."""

    label: str
    median: float
    iqr: float
    times: list[float] = field(repr=False)
    device: str = "cpu"
    threads: int | None = None  # torch (and numba) threads the runs used
    q1: float | None = None  # first and third quartiles of `times`
    q3: float | None = None

    @property
    def best(self) -> float:
        """The fastest run: what the machine can do when nothing gets in the way."""
        return min(self.times) if self.times else self.median

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.05 = 5 %)."""
        return self.iqr / self.median if self.median else 0.0

    @property
    def rounds(self) -> int:
        return len(self.times)

    def __str__(self) -> str:
        lo = self.q1 if self.q1 is not None else self.median - self.iqr / 2
        hi = self.q3 if self.q3 is not None else self.median + self.iqr / 2
        unit, scale = _unit(self.median)
        threads = ngettext(", {n} thread", ", {n} threads", self.threads or 0).format(
            n=self.threads) if self.threads else ""
        device = "" if self.device == "cpu" else f", {self.device}"
        return _("{label}: median {median} (IQR {lo}-{hi}, {rounds} rounds"
                 "{details})").format(
            label=self.label, median=f"{self.median / scale:.3g} {unit}",
            lo=f"{lo / scale:.3g}", hi=f"{hi / scale:.3g}", rounds=self.rounds,
            details=threads + device)

    __repr__ = __str__


def _unit(seconds: float) -> tuple[str, float]:
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale:   # a saving can be negative: -2 ms, not -2e+06 ns
            return unit, scale
    return "ns", 1e-9


def _times(ratio: float) -> str:
    """1.04 -> '1.04x', 2.345 -> '2.35x', 123.4 -> '123x' (never '1x' for a
    difference the rounds can tell, never '1.2e+02x')."""
    return f"{ratio:.3g}x" if ratio < 10 else f"{ratio:.0f}x"


def fmt_time(seconds: float) -> str:
    """0.00123 -> '1.23 ms'."""
    unit, scale = _unit(seconds)
    return f"{seconds / scale:.3g} {unit}"


def from_times(label: str, times: list[float], device: str,
               threads: int | None = None) -> Timing:
    """The `Timing` of raw per-call times: quartiles by the inclusive method."""
    if len(times) >= 2:
        q1, med, q3 = statistics.quantiles(times, n=4, method="inclusive")
    else:
        q1 = med = q3 = times[0]
    return Timing(label, med, q3 - q1, list(times), device,
                  threads or torch.get_num_threads(), q1, q3)


class Comparison(Mapping):
    """Timings of several functions measured in the same interleaved rounds.

    `cmp["fused"]` is a `Timing`; `order` lists (round, label) in the order the
    blocks ran; `verdict(a, b)` is a sentence a notebook can print.
    """

    def __init__(self, timings: dict[str, Timing], order: list[tuple[int, str]],
                 threads: int, device: str = "cpu",
                 loads: tuple[float | None, float | None] = (None, None)):
        self.timings, self.order, self.threads = timings, order, threads
        self.device, self.loads = device, loads

    @property
    def conditions(self) -> str:
        """Where these rounds ran: the line every live table ends with."""
        return _("measured on {where}").format(
            where=describe(self.device, self.threads, self.loads))

    def __getitem__(self, label: str) -> Timing:
        return self.timings[label]

    def __iter__(self):
        return iter(self.timings)

    def __len__(self) -> int:
        return len(self.timings)

    def ratio(self, slow: str, fast: str) -> float:
        """How many times faster `fast` ran than `slow` (ratio of medians)."""
        return self[slow].median / self[fast].median

    def below_noise(self, a: str, b: str) -> bool:
        """True when the two interquartile ranges overlap: the measurement cannot
        tell the two apart, whatever the medians say."""
        ta, tb = self[a], self[b]
        return ta.q1 <= tb.q3 and tb.q1 <= ta.q3

    def verdict(self, a: str, b: str) -> str:
        """'a ran 2.3x faster than b' or 'a and b are within noise here ...', in
        the reader's language; a check reads it with `_("within noise")`,
        `_("faster")` or `_("slower")`, which each language's sentence contains."""
        r = self.ratio(b, a)
        if self.below_noise(a, b):
            return _("{a} and {b} are within noise here (medians differ by "
                     "{diff}, their interquartile ranges overlap)").format(
                a=a, b=b, diff=f"{abs(r - 1):.0%}")
        if r >= 1:
            return _("{a} ran {ratio} faster than {b}").format(a=a, b=b,
                                                               ratio=_times(r))
        return _("{a} ran {ratio} slower than {b}").format(a=a, b=b,
                                                           ratio=_times(1 / r))

    def __str__(self) -> str:
        return "\n".join(str(t) for t in self.timings.values())

    __repr__ = __str__
