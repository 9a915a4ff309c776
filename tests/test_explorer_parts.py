"""The explorer's parts: what changed, honest timing, one unit, the static payload.

Chapter 3 introduces `graphopt.explore`. These tests look inside the package
(`graphopt.explorer`): the diff and highlight sets between baseline and selection,
the notes for a pass that changed nothing, equal graphs timed once, no cold first
timing, the same unit in charts and table, and the drawings' titles.
"""

import json
import re
import time
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import graphopt
from graphopt import models
from graphopt.explorer import Engine, changes, plots, signature
from graphopt.explorer.static import StaticExplorer


class ConvScaleByHand(nn.Module):
    """Chapter 3's experiment in small: a per-channel scale computed from weights."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.gamma = nn.Parameter(torch.rand(4) + 0.5)
        self.register_buffer("var", torch.rand(4) + 0.5)

    def forward(self, x):
        scale = self.gamma * torch.rsqrt(self.var + 1e-5)
        return self.conv(x) * scale[:, None, None]


@pytest.fixture(scope="module")
def basic():
    model, inputs = models.example("basic_block")
    return Engine(model, inputs, ["fold_conv_bn", "eliminate_dead_code"])


def test_equal_graphs_have_equal_signatures():
    # a fresh capture carries bookkeeping attributes a pass's output lacks; a pass
    # that changes nothing must still give the baseline's signature (and its time)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    e = Engine(model, (torch.randn(1, 3, 8, 8),), ["eliminate_dead_code"])
    assert e.result(["eliminate_dead_code"]).signature == e.result(()).signature
    assert signature(e.result(()).module) == e.result(()).signature


def test_diff_names_new_rewritten_and_removed_nodes(basic):
    d = changes.diff(basic.result(()).module, basic.result(["fold_conv_bn"]).module)
    base = {n.name for n in basic.result(()).module.graph.nodes}
    cur = {n.name for n in basic.result(["fold_conv_bn"]).module.graph.nodes}
    assert set(d.new) == cur - base and d.new
    assert {"batch_norm", "batch_norm_1"} <= set(d.removed)
    assert set(d.removed) == base - cur
    assert "add" in d.changed  # the residual add now reads the folded conv
    same = changes.diff(basic.result(()).module, basic.result(()).module)
    assert (same.new, same.changed, same.removed) == ([], [], [])


def test_current_drawing_outlines_exactly_the_changed_nodes(basic):
    base_svg, svg, d = changes.drawings(basic, ["fold_conv_bn"])
    marked = re.findall(r'class="node (gox-new|gox-changed)">\s*<title>([^<]*) \(',
                        svg)
    drawn = set(re.findall(r'class="node[^"]*">\s*<title>([^< ]*)', svg))
    assert {t for c, t in marked if c == "gox-new"} == set(d.new) & drawn
    assert {t for c, t in marked if c == "gox-changed"} == set(d.changed) & drawn
    assert "gox-" not in base_svg.replace("gox-new >", "")
    assert "removed (" in changes.legend_html(d) and "batch_norm_1" in (
        changes.legend_html(d))


def test_drawings_have_titles_and_aria_labels(basic):
    for svg in changes.drawings(basic, ["fold_conv_bn"])[:2]:
        title = re.search(r'class="graph"[^>]*>\s*<title>([^<]*)</title>', svg)[1]
        assert title != "%3" and "BasicBlock" in title and "operator nodes" in title
        assert re.search(r'<svg role="img" aria-label="BasicBlock: [^"]+"', svg)


def test_a_pass_that_changes_nothing_says_so(basic):
    # BasicBlock has no dead op after folding... but has dead num_batches_tracked
    notes = changes.idle_notes(basic, ["fold_conv_bn", "eliminate_dead_code"])
    assert not any(n.startswith("fold_conv_bn: changed nothing") for n in notes)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    e = Engine(model, (torch.randn(1, 3, 8, 8),),
               ["fold_constants", "eliminate_dead_code"])
    notes = changes.idle_notes(e, ["fold_constants", "eliminate_dead_code"])
    assert notes == [f"fold_constants: changed nothing here "
                     f"({changes.NOTHING['fold_constants']})",
                     f"eliminate_dead_code: changed nothing here "
                     f"({changes.NOTHING['eliminate_dead_code']})"]


def test_pass_notes_are_shown_with_their_pass_name(basic):
    r = basic.result(["fold_conv_bn"])
    old = r.step
    r.step = SimpleNamespace(notes=["kept conv2d (two users)",
                                    "fold_conv_bn: kept bn9 (training mode)"])
    try:
        notes = changes.idle_notes(basic, ["fold_conv_bn"])
    finally:
        r.step = old
    assert notes == ["fold_conv_bn: kept conv2d (two users)",
                     "fold_conv_bn: kept bn9 (training mode)"]


def test_fold_first_then_dead_code_in_the_order_listed():
    e = Engine(ConvScaleByHand().eval(), (torch.randn(1, 3, 8, 8),),
               ["fold_constants", "eliminate_dead_code"])
    both = e.result(["fold_constants", "eliminate_dead_code"])
    assert both.passes == ("fold_constants", "eliminate_dead_code")
    assert e.result(["fold_constants"]).kernels < e.result(()).kernels
    assert e.ordered({"eliminate_dead_code", "fold_constants"}) == both.passes


def _slow_start(engine, first_calls=5, delay=0.05):
    """Make each graph's first calls slow, as a cold start is (caches, allocator)."""
    placed = engine._placed

    def cold(r, device):
        module, args = placed(r, device)
        calls = {"n": 0}

        def run(*a, **k):
            calls["n"] += 1
            if calls["n"] <= first_calls:
                time.sleep(delay)
            return module(*a, **k)
        return run, args
    engine._placed = cold


def test_no_cold_baseline_and_equal_graphs_share_one_time():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    e = Engine(model, (torch.randn(1, 3, 8, 8),), ["eliminate_dead_code"])
    _slow_start(e)
    run = e.measure_all(e.combinations(), budget_s=0.05, rounds=7)
    base = e.timing(())
    # the cold calls (50 ms each) are warm-up or one round of seven: not the median
    assert base.median < 0.02, base
    assert e.timing(["eliminate_dead_code"]) is base  # equal graphs: timed once
    assert e.within_noise(["eliminate_dead_code"]) is True
    assert run.threads == 1 and run.rounds == 7 and run.noise >= 0
    assert len(run.timings) == 1


def test_units_are_the_same_in_charts_and_table():
    nums = {"time": (2.5e-4, 1.5e-4), "bytes_moved": (300 * 1024, 3 * 2**20),
            "kernels": (7, 5), "peak_bytes": (48 * 1024, 48 * 1024),
            "nodes": (7, 5), "io_nodes": (14, 8), "within_noise": False,
            "noise": 0.05, "rounds": 9, "threads": 1}
    unit = plots.units(nums)
    assert unit == {"time": ("µs", 1e-6), "bytes_moved": ("KiB", 1024),
                    "peak_bytes": ("KiB", 1024)}
    table = plots.numbers_html(nums)
    assert "bytes moved (KiB)" in table and "MiB" not in table
    assert "<b>3072</b>" in table  # 3 MiB written in the baseline's unit
    assert "time (µs)" in table and "<td>250</td>" in table
    assert "operator nodes (boxes)" in table and "ellipses" in table
    assert "0.60×" in table
    assert "no measurable change" in plots.numbers_html({**nums, "within_noise": True})


def _payload(html):
    return json.loads(re.search(r'-data">(.*?)</script>', html, re.S)[1])


def active_selection(data, mask):
    """The passes ticked in combination `mask` (a bitmask over the active passes)."""
    active = [p for p, on in zip(data["passes"], data["active"]) if on]
    return [p for j, p in enumerate(active) if mask >> j & 1]


def test_static_payload_times_once_per_graph_and_marks_noise():
    model, inputs = models.example("seed_conv_block")
    passes = ["fold_constants", "eliminate_dead_code", "fuse_patterns"]
    st = StaticExplorer(model, *inputs, passes=passes, time_budget_s=0.02)
    data = _payload(st.html)
    e = st.engine
    # fold_constants finds nothing on this block: shown idle, not combined
    assert data["active"] == [False, True, True]
    assert "fold_constants" in data["idle"] and len(data["combos"]) == 4
    by_sig = {}
    for mask, combo in enumerate(data["combos"]):
        sel = active_selection(data, mask)
        by_sig.setdefault(e.result(sel).signature, set()).add(combo["time"])
        assert isinstance(combo["same_time"], bool) and combo["time_ratio"] > 0
        assert combo["notes"] == changes.idle_notes(e, sel)
    assert all(len(times) == 1 for times in by_sig.values())
    assert data["combos"][0]["same_time"] is True
    assert data["combos"][0]["time_ratio"] == 1.0
    assert data["units"]["bytes_moved"][0] in ("B", "KiB", "MiB", "GiB")
    assert data["rows"][0] == ["nodes", "operator nodes (boxes)"]
    assert "interleaved rounds" in st.html and "1 thread" in st.html
    # the baseline panel is drawn once, with ids of its own
    assert st.html.count('class="gox-panel gox-base"') == 1
    assert re.search(r'id="gox\d+-[0-9a-f]+-base-node1"', st.html)
    assert "max-width: none" in st.html  # natural size, scrolling panels


class Masked(nn.Module):
    """A model with a keyword input, as Hugging Face models take attention masks."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x, mask=None):
        return torch.relu(self.proj(x)) * mask


def test_keyword_inputs_reach_the_model():
    x, mask = torch.randn(2, 8), (torch.rand(2, 8) > 0.5).float()
    model = Masked().eval()
    ex = graphopt.explore(model, x, mask=mask, static=False, prefetch=False,
                          passes=["fuse_elementwise"])
    assert ex.error is None, ex.error
    e = ex.engine
    assert len(e.inputs) == 2  # x and mask, flat, as the captured graph takes them
    ex.select(["fuse_elementwise"])
    out = e.result(["fuse_elementwise"]).module(*e.inputs)
    out = out[0] if isinstance(out, (tuple, list)) else out
    torch.testing.assert_close(out, model(x, mask=mask))
    st = graphopt.explore(model, x, mask=mask, static=True,
                          passes=["fuse_elementwise"])
    assert st.error is None and len(_payload(st.html)["combos"]) == 2


def test_every_pipeline_pass_can_say_why_it_changed_nothing():
    assert set(graphopt.PIPELINE) <= set(changes.NOTHING)


def test_explore_on_the_site_displays_the_same_way_as_in_jupyterlab(monkeypatch):
    """The chapters display `explorer.widget`; on the site (GRAPHOPT_STATIC=1, no
    kernel) explore returns a StaticExplorer, whose widget is its HTML."""
    monkeypatch.setenv("GRAPHOPT_STATIC", "1")
    model, inputs = models.example("add_mul")
    explorer = graphopt.explore(model, *inputs, passes=["fuse_elementwise"])
    assert isinstance(explorer, StaticExplorer)
    assert explorer.widget._repr_html_() == explorer.html
