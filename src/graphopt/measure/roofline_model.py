"""The roofline model: a kernel's work, traffic and time against the roofs (ch. 6).

A kernel with few FLOPs per byte moved (low arithmetic intensity) is bounded by
memory bandwidth; one with many, by compute. `roofline` plots measured kernels
under the two roofs `limits` measured on this machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..i18n import N_, figure_language, gettext_in


@dataclass
class KernelPoint:
    """One measured kernel: its work (FLOPs), its traffic (bytes) and its time."""

    name: str
    flops: float
    nbytes: float
    seconds: float

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte moved."""
        return self.flops / self.nbytes

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9

    @property
    def gbps(self) -> float:
        return self.nbytes / self.seconds / 1e9


def attainable_gflops(intensity: float, bandwidth_gbps: float,
                      peak_gflops: float) -> float:
    """The roofline: min(compute roof, intensity x memory bandwidth)."""
    return min(peak_gflops, intensity * bandwidth_gbps)


def roofline(points: Iterable[KernelPoint], bandwidth_gbps: float, peak_gflops: float,
             device: str, ax=None):
    """Plot kernels on this machine's roofline; returns the matplotlib Figure.
    Its words follow GRAPHOPT_LANG (graphopt.i18n), in a CJK font for Chinese."""
    import matplotlib
    import matplotlib.pyplot as plt

    lang, font = figure_language()
    with matplotlib.rc_context({"font.family": [font, "DejaVu Sans"]} if font else {}):
        if ax is None:
            _, ax = plt.subplots(figsize=(7, 4.5))
        _draw(ax, list(points), bandwidth_gbps, peak_gflops, device, lang)
    return ax.figure


def _draw(ax, points: list[KernelPoint], bandwidth_gbps: float, peak_gflops: float,
          device: str, lang: str) -> None:
    xs = [p.intensity for p in points] + [peak_gflops / bandwidth_gbps]
    lo, hi = min(xs) / 4, max(xs) * 4
    grid = [lo * (hi / lo) ** (k / 200) for k in range(201)]
    ax.plot(grid, [attainable_gflops(x, bandwidth_gbps, peak_gflops) for x in grid],
            color="black", lw=1.5,
            label=gettext_in(lang, N_("roof: copy {bandwidth} GB/s, matmul {peak} "
                                      "GFLOP/s")).format(
                bandwidth=f"{bandwidth_gbps:.0f}", peak=f"{peak_gflops:.0f}"))
    for i, p in enumerate(points):
        ax.scatter([p.intensity], [p.gflops], s=40, zorder=3, color=f"C{i % 10}",
                   label=f"{p.name} ({p.gbps:.3g} GB/s)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(gettext_in(lang, N_("arithmetic intensity (FLOP / byte)")))
    ax.set_ylabel(gettext_in(lang, N_("achieved GFLOP/s")))
    ax.set_title(gettext_in(lang, N_("Roofline of {device}")).format(device=device),
                 fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
