"""The static explorer scales with what changes, not with 2^passes (issue #21).

Chapter 3 introduces `graphopt.explore`; `static=True` precomputes the combinations
a reader can tick. Here: idle passes are not combined, equal graphs share one
drawing and one set of numbers, a request over the budget fails before any work
with a message that says what to pass, and ResNet-18 finishes in bounded memory.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from graphopt import models
from graphopt.errors import ExplorerBudgetError, GraphoptError
from graphopt.explorer.static import StaticExplorer


def test_equal_graphs_are_built_once_and_shared():
    # run in this order, fold_conv_bn finds no conv -> bn left once the backend has
    # packed every lone conv: {backend} and {backend, fold_conv_bn} are one graph
    model, inputs = models.example("basic_block")
    passes = ["backend", "fold_conv_bn"]
    st = StaticExplorer(model, *inputs, measure=False, passes=passes)
    data = st.data
    assert data["active"] == [True, True] and len(data["combos"]) == 4
    sels = [[p for j, p in enumerate(passes) if m >> j & 1] for m in range(4)]
    sigs = [st.engine.result(sel).signature for sel in sels]
    assert sigs[1] == sigs[3] and len(set(sigs)) == 3
    for i, a in enumerate(sigs):  # equal graphs: one drawing, equal numbers
        for j, b in enumerate(sigs):
            if a == b:
                ci, cj = data["combos"][i], data["combos"][j]
                assert ci["svg"] == cj["svg"]
                assert (ci["nodes"], ci["bytes_moved"]) == (cj["nodes"],
                                                            cj["bytes_moved"])
    assert len(data["svgs"]) == 3 and data["applied"] == 3  # one pass per edge


def test_over_budget_raises_before_the_walk_and_says_what_to_pass():
    model, inputs = models.example("seed_conv_block")
    with pytest.raises(ExplorerBudgetError, match=r"passes=\[") as info:
        StaticExplorer(model, *inputs, measure=False, max_combinations=2)
    assert isinstance(info.value, GraphoptError)
    assert "eliminate_dead_code" in str(info.value)  # it names the active passes
    with pytest.raises(ExplorerBudgetError, match="MiB"):
        StaticExplorer(model, *inputs, measure=False, max_bytes=1024)


# Measured 2026-12 on the 2-core build machine, fresh process, explore(static=True)
# on ResNet-18 (1x3x64x64): peak RSS 878-932 MiB and VmPeak (address space) 1638-1692
# MiB, 32 combinations of 5 active passes, 24 distinct graphs, since stages share the
# weights no pass changed (passes/result.working_copy; a deep copy per pass: 1451
# and 2211 MiB). torch maps much more address space than it touches, so the limit
# is set on VmPeak: 2.1 GiB, about 25 % above 1692 MiB, below the 2211 MiB of a
# copy per pass (benchmarks/entry_points.py). Before issue #21 the call passed 20 GB.
# Since the core/backend split (issue 22) `backend` is a pass the explorer combines
# too: 64 combinations of 6 active passes, 48 distinct drawings, 55 pass
# applications, 724 MiB RSS, 1389 MiB VmPeak, 43 s at load 1 (fuse_patterns no
# longer packs weights; only the backend stage does); 2026-12-07: 737 MiB RSS, 1403
# MiB VmPeak (benchmarks/entry_points.py --model resnet18 --entry explore_static);
# with oneDNN's own library loaded (backend/onednn_capi.py, its 55 MB mapped) 812
# MiB RSS and 1517 MiB VmPeak: the interpreter runs torch's ops, so the explorer
# makes no oneDNN primitive (a graph it runs once would never reuse one).
# The limit is 25 % above that, as every bound of tests/test_entry_point_bounds.py:
# far below the 2211 MiB of a copy per pass. This is the static explorer's one bound:
# ResNet-34's (1621 MiB, limit 2026) took 74 s more of every CI run and, 25 % above
# its own peak, let a copy per pass through (1910 MiB before stages shared weights).
# Later on 2026-12-07 a primitive's call became one numba-compiled native call
# (backend/onednn_execute.py), and the explorer makes primitives outside the
# interpreter (472 on this run, not traced), so numba and LLVM are mapped too: 911
# MiB RSS, 1707 MiB VmPeak. The limit is 25 % above that; a copy per pass (2211 MiB
# before numba, about 2400 with it) stays above it.
ADDRESS_LIMIT = int(1.25 * 1707) * 2**20

_CHILD = textwrap.dedent("""
    import json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
    import graphopt, graphopt.models as m
    model, x = m.example("resnet18", size=64)
    st = graphopt.explore(model, *x, static=True, time_budget_s=0.01)
    print(json.dumps({"error": st.error, "combos": len(st.data["combos"]),
                      "svgs": len(st.data["svgs"])}))
""")


@pytest.mark.slow
def test_resnet18_static_explorer_fits_in_bounded_address_space():
    # 2 threads, as measured: VmPeak grows with threads (stacks, malloc arenas)
    env = {**os.environ, "GRAPHOPT_QUIET": "1", "OMP_NUM_THREADS": "2",
           "MKL_NUM_THREADS": "2", "NUMBA_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", _CHILD, str(ADDRESS_LIMIT)],
                         capture_output=True, text=True, timeout=900, env=env,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["error"] is None
    assert got["combos"] == 64 and got["svgs"] < got["combos"]  # shared drawings
