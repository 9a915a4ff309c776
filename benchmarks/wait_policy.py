"""The OpenMP wait policy a benchmark asked for (`--wait`), set before torch loads.

OpenMP reads its variables once, when torch loads, which is before
`graphopt.peers.waiting` can be imported: so a single-process benchmark imports
this first (`WAIT = wait_policy.from_argv()`), then checks the result against
`peers.waiting` once graphopt is loaded (`wait_policy.check(WAIT)`).
"""

from __future__ import annotations

import os
import sys

CHOICES = ("bounded", "passive")


def from_argv(argv=None) -> str:
    """Read `--wait` (default "bounded") and set the variables peers.waiting names."""
    argv = sys.argv if argv is None else argv
    wait = argv[argv.index("--wait") + 1] if "--wait" in argv[:-1] else "bounded"
    if wait == "passive":
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        os.environ.pop("GOMP_SPINCOUNT", None)
    else:
        os.environ.pop("OMP_WAIT_POLICY", None)
        os.environ["GOMP_SPINCOUNT"] = "30000"
    return wait


def check(wait: str) -> None:
    """Stop unless this process's variables are the ones peers.waiting means."""
    from graphopt.peers import waiting

    if waiting.current() != wait:
        raise SystemExit(f"this process runs with {waiting.current()!r} wait variables "
                         f"but --wait {wait}: peers.waiting changed; update "
                         "benchmarks/wait_policy.py")
