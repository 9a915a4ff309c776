"""A one-line progress counter for long measurements run from a terminal (ch. 6).

`Progress` needs no tqdm: on a terminal it rewrites one line; anywhere else it is
silent, so a notebook's saved outputs stay clean and deterministic. `bar` is tqdm's,
for the explorer's long precomputation.
"""

from __future__ import annotations

import os
import sys
import time


class Progress:
    """A one-line progress counter for long measurements (no tqdm needed).

    On a terminal it rewrites `label: 3/8 name` on one line (stderr) and ends
    with a newline. Anywhere else (a notebook, a log file) it prints nothing:
    carriage-return updates would land in saved outputs as a pile of lines.
    """

    def __init__(self, total: int, label: str = "measuring", stream=None):
        self.total, self.label, self.done = total, label, 0
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        isatty = getattr(self.stream, "isatty", None)
        self.live = bool(isatty and isatty()) and not quiet()

    def step(self, name: str = "") -> None:
        self.done += 1
        if not self.live:
            return
        end = "\n" if self.done == self.total else ""
        elapsed = time.perf_counter() - self.start
        self.stream.write(f"\r{self.label}: {self.done}/{self.total} {name:<28}"
                          f" {elapsed:5.1f} s{end}")
        self.stream.flush()


def quiet() -> bool:
    """True when progress output is unwanted (GRAPHOPT_QUIET=1)."""
    return os.environ.get("GRAPHOPT_QUIET", "0") not in ("", "0")


def bar(total: int, desc: str):
    """A tqdm progress bar for a long step (the static explorer's precomputation).

    `tqdm.auto`: a widget in a notebook, one rewritten line on a terminal. It is
    off under GRAPHOPT_QUIET=1 and under CI=1 (the tests and the site build), where
    a bar would only land in logs and saved outputs; it leaves nothing behind.
    """
    from tqdm.auto import tqdm
    off = quiet() or os.environ.get("CI", "") not in ("", "0")
    return tqdm(total=total, desc=desc, leave=False, disable=off or None)
