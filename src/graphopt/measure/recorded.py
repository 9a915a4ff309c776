"""A recorded run of `benchmarks/models.py`, read back from `benchmarks/results/`.

A timing taken on a busy laptop can only say "within noise"; a run recorded on a
quieter machine can say more, as long as it is shown as what it is: another run, on
another day, on a named machine. `models_run` returns one section of
`models_cpu.txt` with its date, machine, load and the kind of spread it recorded, so
chapter 7 prints it beside its live measurement and never in its place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"
# Runs recorded before `benchmarks/models.py` took the book's one spread (the rounds'
# interquartile range) printed the range from the fastest round to the slowest; a
# section says which it holds by naming the IQR in its heading or its lines.
MAX_MIN = "fastest to slowest round over the median (max - min), not the IQR"
IQR = "the rounds' interquartile range over the median"


@dataclass
class RecordedRun:
    """One recorded section: medians (s per call) per model and variant, and context."""

    when: str                   # "2026-12-01 19:05 UTC"
    machine: str                # "2-core AMD EPYC VM, torch 2.13.0+cpu, ..."
    load: tuple[float, float]   # 1-minute load average at start and at end
    heading: str                # the section's first line, as recorded
    medians: dict[str, dict[str, float]]  # model -> variant -> seconds per call
    spreads: dict[str, dict[str, float]]  # model -> variant -> spread / median
    spread_kind: str = MAX_MIN            # what `spreads` measures (see below)

    def label(self) -> str:
        return (f"recorded {self.when} on a {self.machine}, load "
                f"{self.load[0]:.1f}-{self.load[1]:.1f}; its spreads are "
                f"{self.spread_kind}")


def models_run(stamp: str, path: Path | None = None) -> RecordedRun:
    """The section of `models_cpu.txt` whose heading holds `stamp` ("19:05 UTC")."""
    path = path or RESULTS / "models_cpu.txt"
    text = path.read_text()
    start = next(m.start() for m in re.finditer(r"^# =====.*$", text, re.M)
                 if stamp in m.group(0))
    end = text.find("\n# =====", start + 1)
    section = text[start:end if end > 0 else len(text)]
    medians: dict[str, dict[str, float]] = {}
    spreads: dict[str, dict[str, float]] = {}
    model = None
    for line in section.splitlines():
        head = re.match(r"^(\w+), batch 1:", line)
        if head:
            model = head.group(1)
            medians[model], spreads[model] = {}, {}
            continue
        row = re.match(r"^\s+(\w+)\s+([\d.]+)ms\s+(\d+)%", line)
        if model and row:
            medians[model][row.group(1)] = float(row.group(2)) / 1e3
            spreads[model][row.group(1)] = float(row.group(3)) / 100
    loads = [float(x) for x in re.findall(
        r"load average (?:at start|at end) ([\d.]+)", section)]
    readme = (path.parent / "README.md").read_text()
    date, machine = re.search(r"CPU runs \(recorded (\S+), ([^)]*)\)", readme).groups()
    versions = re.search(r"^(torch [^,]+, onnxruntime [^,]+)", section, re.M).group(1)
    return RecordedRun(when=f"{date} {stamp}", machine=f"{machine} ({versions})",
                       load=(loads[0], loads[-1]),
                       heading=section.splitlines()[0].strip("# ="),
                       medians=medians, spreads=spreads,
                       spread_kind=IQR if "IQR" in section else MAX_MIN)
