"""The pass explorer, headless: callbacks, caching, measuring, errors, static fragment.

Chapter 3 introduces `graphopt.explore`. These tests drive the widget's callbacks the
way a click does (setting a checkbox's value) and compare what the explorer shows with
what `graphopt.optimize` computes directly for the same passes. What changed between
baseline and selection, timing and units are in test_explorer_parts.py.
"""

import json
import re

import pytest
import torch
from torch import nn

import graphopt
from graphopt import models
from graphopt.explorer import StaticExplorer, changes
from graphopt.explorer import engine as explorer_engine
from graphopt.explorer import widget as widgets
from graphopt.explorer.static_walk import active_passes


@pytest.fixture
def calls(monkeypatch):
    """Record every optimize() call the explorer makes (to count cache misses)."""
    optimize, pipeline = explorer_engine._pipeline()
    seen = []

    def counting(model, *inputs, passes=None, **options):
        seen.append(tuple(passes) if passes is not None else None)
        return optimize(model, *inputs, passes=passes, **options)

    monkeypatch.setattr(explorer_engine, "_pipeline", lambda: (counting, pipeline))
    return seen


_captured = {}


def _direct(model, inputs, passes, stats=True):
    """The stage optimize() builds when run from scratch with `passes` in order
    (`stats=False`: its graph only, no stage run on the inputs)."""
    if id(model) not in _captured:  # capture once per model: torch.export is slow
        _captured[id(model)] = (model, graphopt.capture(model, *inputs))
    ordered = [p for p in graphopt.PIPELINE if p in passes]
    captured = _captured[id(model)][1]
    return graphopt.optimize(captured, *inputs, passes=ordered,
                             stats=stats).stages[-1]


def _same_drawing(a: str, b: str) -> bool:
    # Graphviz numbers edges in the order draw() emits them, which follows each
    # node's users in insertion order: equal graphs built along different paths
    # can number the same edges differently.
    def strip(svg):
        return re.sub(r'id="edge\d+"', 'id="edge"', svg)
    return strip(a) == strip(b)


class DataDependent(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # a branch on a tensor's value: no single graph holds it
            return x * 2
        return x - 1


def _panels(ex) -> tuple[str, str]:
    """The SVGs in the live explorer's baseline and current panels (drawn current
    first, baseline under it)."""
    svgs = re.findall(r"<svg\b.*?</svg>", ex.graph.value, re.S)
    assert len(svgs) == 2 and "gox-current" in ex.graph.value.split(svgs[0])[0]
    return svgs[1].strip(), svgs[0].strip()


def test_explore_is_public_and_lists_the_pipeline_passes():
    model, inputs = models.example("seed_conv_block")
    ex = graphopt.explore(model, *inputs, prefetch=False, static=False)
    assert isinstance(ex, widgets.Explorer)
    assert list(ex.checkboxes) == list(graphopt.PIPELINE)
    assert ex.selection == frozenset()
    assert ex.device.options == tuple(widgets.available_devices())
    assert "cpu" in ex.device.options


@pytest.mark.parametrize("name", ["seed_conv_block", "basic_block"])
def test_toggling_a_box_shows_that_combination(name):
    model, inputs = models.example(name)
    ex = widgets.explore(model, *inputs, prefetch=False, static=False)
    captured = _direct(model, inputs, ())
    assert _same_drawing(ex.engine.svg(()), graphopt.draw(captured.module).svg())
    base_svg = changes.drawings(ex.engine, ())[0]
    assert _panels(ex) == (base_svg, changes.drawings(ex.engine, ())[1])
    for p in graphopt.PIPELINE:
        ex.checkboxes[p].value = True
        stage = _direct(model, inputs, ex.selection)
        r = ex.engine.result(ex.selection)
        assert (r.nodes, r.kernels, r.bytes_moved, r.peak_bytes) == (
            stage.stats.nodes if isinstance(stage.stats.nodes, int)
            else len(stage.stats.nodes),
            stage.stats.kernels, stage.stats.bytes_moved, stage.stats.peak_bytes)
        # the baseline stays on the left, the selection's graph is on the right
        assert _panels(ex) == (base_svg, changes.drawings(ex.engine, ex.selection)[1])
        assert _same_drawing(ex.engine.svg(ex.selection),
                             graphopt.draw(stage.module).svg())
        assert f"<b>{r.nodes}</b>" in ex.numbers.value
        assert bytes(ex.plot.value).startswith(b"\x89PNG")


def test_fold_conv_bn_removes_both_batch_norms_of_a_basic_block():
    # two Conv+BN pairs: ticking fold_conv_bn leaves 5 of the 7 ops, and 5 kernels
    model, inputs = models.example("basic_block")
    ex = widgets.explore(model, *inputs, prefetch=False, static=False)
    base = ex.engine.result(())
    assert "batch_norm" in _panels(ex)[1]
    ex.checkboxes["fold_conv_bn"].value = True
    r = ex.engine.result(ex.selection)
    assert (base.nodes, r.nodes) == (7, 5)
    assert (base.kernels, r.kernels) == (7, 5)
    assert r.bytes_moved < base.bytes_moved
    left, right = _panels(ex)
    assert "batch_norm" in left and "batch_norm" not in right
    assert "<b>5</b>" in ex.numbers.value and "0.71×" in ex.numbers.value
    # both batch norms are listed as removed under the current graph
    removed = ex.graph.value.split("removed (")[1].split("</span>")[0]
    assert "batch_norm," in removed and "batch_norm_1" in removed


def _active_engine(model, inputs) -> widgets.Engine:
    """An engine over the passes that change `model` (the static explorer's set).

    Every combination of all nine passes is 512 optimize() runs (11 minutes here);
    a pass that changes nothing, alone or in the pipeline, only repeats a graph, so
    the combinations of the active ones hold every distinct case."""
    active, idle = active_passes(widgets.Engine(model, inputs))
    assert len(active) >= 4 and idle, (active, idle)  # real work left, some cut
    return widgets.Engine(model, inputs, passes=active)


@pytest.mark.slow
def test_every_combination_equals_optimize_from_scratch():
    # the explorer applies one pass to its parent combination's graph; that must give
    # the same graph as running optimize() with all the passes from the start
    model, inputs = models.example("basic_block")
    engine = _active_engine(model, inputs)
    for combo in engine.combinations():
        stage = _direct(model, inputs, combo, stats=False)  # the code is compared
        assert engine.result(combo).module.code == stage.module.code, sorted(combo)


def test_cache_hits_and_misses(calls):
    model, inputs = models.example("seed_conv_block")
    ex = widgets.explore(model, *inputs, prefetch=False, static=False)
    first = graphopt.PIPELINE[0]
    assert calls == [()]  # the capture
    ex.checkboxes[first].value = True
    assert calls == [(), (first,)]
    misses = ex.engine.misses
    ex.checkboxes[first].value = False
    ex.checkboxes[first].value = True
    assert calls == [(), (first,)]  # nothing recomputed
    assert ex.engine.misses == misses
    assert ex.engine.hits >= 2
    key = frozenset([first])
    assert ex.engine.cached(key)
    assert ex.engine.result(key).signature in ex.engine._svgs


def test_prefetch_fills_every_combination_one_click_away(calls):
    model, inputs = models.example("seed_conv_block")
    passes = graphopt.PIPELINE[:3]
    ex = widgets.explore(model, *inputs, passes=passes, static=False)
    assert ex._prefetching is None  # nothing runs in the background before a click
    ex.checkboxes[passes[2]].value = True
    ex.wait(timeout=300)
    sel = ex.selection
    assert all(ex.engine.cached(sel ^ {p}) for p in passes)
    before = len(calls)
    ex.select(sel ^ {passes[0]})  # one click away: only looked up
    assert len(calls) == before


def test_live_engine_keeps_a_few_modules_and_rebuilds_the_rest(calls):
    # issue #21: caching every combination's module ran ResNet-18 out of memory
    model, inputs = models.example("basic_block")
    engine = _active_engine(model, inputs)
    engine.max_modules = 2
    combos = engine.combinations()
    numbers = {c: engine.result(c).bytes_moved for c in combos}
    assert len(engine._modules) <= 2
    for combo in combos[::-1]:  # evicted ones come back equal, from their parent
        stage = _direct(model, inputs, combo, stats=False)  # the code is compared
        assert engine.result(combo).module.code == stage.module.code, sorted(combo)
        assert engine.result(combo).bytes_moved == numbers[combo]
        assert len(engine._modules) <= 2


def test_reset_unticks_everything():
    model, inputs = models.example("seed_conv_block")
    ex = widgets.explore(model, *inputs, selected=graphopt.PIPELINE, prefetch=False,
                         static=False)
    assert ex.selection == frozenset(graphopt.PIPELINE)
    ex.reset_button.click()
    assert ex.selection == frozenset()
    assert _panels(ex)[1] == changes.drawings(ex.engine, ())[1]


def test_graphs_at_natural_size_unless_fit_is_pressed():
    model, inputs = models.example("seed_conv_block")
    ex = widgets.explore(model, *inputs, prefetch=False, static=False)
    assert "svg {max-width: none !important" in ex.graph.value
    assert "overflow:auto" in ex.graph.value  # the panels scroll instead
    ex.fit_button.value = True
    assert "svg {max-width: 100% !important" in ex.graph.value
    ex.fit_button.value = False
    assert "svg {max-width: none !important" in ex.graph.value


def test_measure_times_baseline_and_selection_in_a_thread():
    model, inputs = models.example("seed_conv_block")
    ex = widgets.explore(model, *inputs, prefetch=False, static=False)
    assert "press measure" in ex.status.value
    assert ex.numbers.value.count("not measured") == 2
    ex.select(graphopt.PIPELINE)
    ex.measure(wait=True)
    assert ex.engine.time((), "cpu") > 0
    assert ex.engine.time(graphopt.PIPELINE, "cpu") > 0
    assert ex.progress.value == ex.progress.max
    assert "not measured" not in ex.numbers.value
    assert not ex.measure_button.disabled
    # toggles afterwards use the cached times
    ex.reset()
    assert ex.numbers.value.count("not measured") == 0


def test_uncapturable_model_shows_the_error_inside_the_widget():
    ex = widgets.explore(DataDependent(), torch.ones(3), static=False)
    assert ex.error is not None and "torch.cond" in ex.error
    shown = ex.widget.children[-1].value
    assert "graphopt could not explore this model" in shown
    assert "torch.cond" in shown and "Traceback" not in shown


def test_unknown_pass_names_say_which_exist():
    model, inputs = models.example("seed_conv_block")
    ex = widgets.explore(model, *inputs, passes=["fold_everything"], static=False)
    assert "fold_everything" in ex.error and graphopt.PIPELINE[0] in ex.error


def test_passes_run_in_the_order_listed():
    # chapter 3 lists fold_constants before eliminate_dead_code, against the
    # pipeline's order: the boxes appear, and the ticked passes run, in that order
    model, inputs = models.example("seed_conv_block")
    wanted = ["fold_constants", "eliminate_dead_code"]
    ex = widgets.explore(model, *inputs, passes=wanted, prefetch=False, static=False)
    assert list(ex.checkboxes) == wanted
    ex.select(wanted)
    assert ex.engine.result(ex.selection).passes == tuple(wanted)
    assert ex.engine.result(ex.selection).module.code == _direct_in_order(
        model, inputs, wanted).module.code


def _direct_in_order(model, inputs, passes):
    captured = _captured[id(model)][1] if id(model) in _captured else (
        graphopt.capture(model, *inputs))
    return graphopt.optimize(captured, *inputs, passes=list(passes)).stages[-1]


def test_cuda_is_refused_clearly_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    model, inputs = models.example("seed_conv_block")
    engine = widgets.Engine(model, inputs)
    with pytest.raises(graphopt.NoGPUError, match="cpu"):
        engine.measure((), "cuda")


# ------------------------------------------------------------------ static mode

def _payload(fragment):
    m = re.search(r'<script type="application/json" id="([^"]+)-data">(.*?)</script>',
                  fragment, re.S)
    return m.group(1), json.loads(m.group(2))


def test_static_fragment_holds_every_combination():
    model, inputs = models.example("seed_conv_block")
    passes = graphopt.PIPELINE[:3]
    st = widgets.explore(model, *inputs, passes=passes, static=True)
    assert isinstance(st, StaticExplorer) and st._repr_html_() == st.html
    uid, data = _payload(st.html)
    assert data["passes"] == list(passes)
    active = [p for p, on in zip(passes, data["active"]) if on]
    # only the passes that change this block are combined; the others show idle
    assert set(data["idle"]) == set(passes) - set(active)
    assert len(data["combos"]) == 2 ** len(active)
    engine = st.engine
    for mask, combo in enumerate(data["combos"]):
        r = engine.result([p for j, p in enumerate(active) if mask >> j & 1])
        assert (combo["nodes"], combo["kernels"], combo["bytes_moved"],
                combo["peak_bytes"]) == (r.nodes, r.kernels, r.bytes_moved,
                                         r.peak_bytes)
        assert combo["time"] > 0
    assert len(data["svgs"]) == len({c["svg"] for c in data["combos"]})
    # self-contained: no external loads, every id carries this fragment's prefix
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', st.html)
    assert "<link" not in st.html and "import(" not in st.html
    ids = re.findall(r'\bid=["\']([^"\']+)', st.html)
    assert ids and all(i.startswith(uid) for i in ids)


def test_two_static_fragments_do_not_share_ids():
    model, inputs = models.example("seed_conv_block")
    a = widgets.explore(model, *inputs, passes=graphopt.PIPELINE[:1], static=True)
    b = widgets.explore(model, *inputs, passes=graphopt.PIPELINE[:1], static=True)
    ids_a = set(re.findall(r'\bid=["\']([^"\']+)', a.html))
    ids_b = set(re.findall(r'\bid=["\']([^"\']+)', b.html))
    assert ids_a and not ids_a & ids_b


def test_site_build_switches_to_static(monkeypatch):
    monkeypatch.setenv("GRAPHOPT_STATIC", "1")
    model, inputs = models.example("seed_conv_block")
    st = graphopt.explore(model, *inputs, passes=graphopt.PIPELINE[:1])
    assert isinstance(st, StaticExplorer)


def test_static_error_is_html_not_a_traceback():
    st = widgets.explore(DataDependent(), torch.ones(3), static=True)
    assert "graphopt could not explore this model" in st.html
    assert "torch.cond" in st.html


def test_a_pass_that_fails_shows_its_error_in_the_graph_panel(monkeypatch):
    model, inputs = models.example("seed_conv_block")
    ex = widgets.explore(model, *inputs, prefetch=False, static=False)

    def broken(gm, *args, passes=None, **options):
        raise RuntimeError("pass exploded")

    monkeypatch.setattr(ex.engine, "optimize", broken)
    ex.checkboxes[graphopt.PIPELINE[0]].value = True  # no exception escapes the click
    assert "RuntimeError: pass exploded" in ex.graph.value
    ex.checkboxes[graphopt.PIPELINE[0]].value = False  # cached: back to the baseline
    assert _panels(ex)[1] == changes.drawings(ex.engine, ())[1]
