"""Every public entry point fits in a stated address space on real models (issue #21).

Each call runs in a fresh subprocess under RLIMIT_AS about 25 % above the VmPeak
`benchmarks/entry_points.py` measured for it (src/graphopt/README.md, "Bounds"), so
a change that makes an entry point map much more memory fails here, not on a
reader's laptop. VmPeak, not RSS: RLIMIT_AS limits address space, and torch maps
far more than it touches. Only completion is asserted: times are in the table.
"""

import importlib.util
import pathlib

import pytest

_SCRIPT = pathlib.Path(__file__).parents[1] / "benchmarks" / "entry_points.py"
_spec = importlib.util.spec_from_file_location("entry_points", _SCRIPT)
entry_points = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(entry_points)

MiB = 2**20

# (model, sizes, entry point, measured VmPeak MiB): 2026-12-06, 2-core EPYC, fresh
# process, import and model building included (benchmarks/entry_points.py, the
# table in src/graphopt/README.md); before stages shared the frozen weights no pass
# changed, optimize on ResNet-18 mapped 1621 MiB
MEASURED = [
    ("resnet18", {"size": 64}, "capture", 1168),
    ("resnet18", {"size": 64}, "optimize", 1420),
    ("resnet18", {"size": 64}, "explore_live", 1229),
    ("resnet18", {"size": 64}, "draw", 1168),
    ("resnet18", {"size": 64}, "compare_capture", 1518),
    ("bert", {"seq_len": 32}, "capture", 1223),
    ("bert", {"seq_len": 32}, "optimize", 1927),
]
# the slower ones; the static explorer's bound is ResNet-18's, in
# test_explorer_static_bounds.py (ResNet-34's, 1621 MiB, is not checked: its 25 %
# let through the 1910 MiB it mapped before its stages shared the weights no pass
# changed, which ResNet-18's catches, and it took 74 s of each CI run)
SLOW = [
    ("resnet18", {"size": 64}, "optimize_check", 1457),
]


def _limit(vmpeak_mib: int) -> int:
    return int(vmpeak_mib * 1.25) * MiB


def _check(model, sizes, entry, vmpeak_mib):
    got = entry_points.run_one(model, sizes, entry, limit=_limit(vmpeak_mib))
    assert got["vmpeak_mib"] <= _limit(vmpeak_mib) / MiB


@pytest.mark.parametrize("model,sizes,entry,vmpeak_mib", MEASURED,
                         ids=[f"{m}-{e}" for m, _, e, _ in MEASURED])
def test_entry_point_fits_its_address_space(model, sizes, entry, vmpeak_mib):
    _check(model, sizes, entry, vmpeak_mib)


@pytest.mark.slow
@pytest.mark.parametrize("model,sizes,entry,vmpeak_mib", SLOW,
                         ids=[f"{m}-{e}" for m, _, e, _ in SLOW])
def test_slow_entry_point_fits_its_address_space(model, sizes, entry, vmpeak_mib):
    _check(model, sizes, entry, vmpeak_mib)


def test_a_limit_below_the_peak_fails():
    # the limit is real: far below what torch maps, the same call cannot finish
    with pytest.raises(RuntimeError, match="capture on resnet18 failed"):
        entry_points.run_one("resnet18", {"size": 64}, "capture", limit=300 * MiB)
