"""The explorer's fixed labels follow the language (issue 25): English stays as it was.

The live widget reads GRAPHOPT_LANG (`make lab LANG=zh` sets it to zh); the static
fragment reads its page's `<html lang>` in JavaScript, so one fragment serves the
English and the Chinese site.
"""

from __future__ import annotations

import re

import pytest

from browser import chromium, serve, watch
from graphopt import explorer as widgets
from graphopt import i18n, models
from graphopt.explorer import static_fragment, widget

__all__ = ["chromium"]  # the session fixture, imported for pytest

# The English labels as the saved outputs of the English chapters show them.
ENGLISH = {"reset": "reset", "measure": "measure", "device": "device",
           "fit": "fit graphs", "order": "passes, run in the order listed:"}


def _labels(ex) -> dict[str, str]:
    return {"reset": ex.reset_button.description,
            "measure": ex.measure_button.description,
            "device": ex.device.description, "fit": ex.fit_button.description,
            "order": ex.widget.children[1].children[0].value,
            "header": ex.widget.children[0].value, "graph": ex.graph.value}


@pytest.fixture(scope="module")
def block():
    return models.example("basic_block")


def test_live_widget_is_english_by_default(block, monkeypatch):
    monkeypatch.delenv("GRAPHOPT_LANG", raising=False)
    got = _labels(widgets.explore(*block[:1], *block[1], prefetch=False, static=False))
    assert {k: got[k] for k in ENGLISH} == ENGLISH
    assert got["header"].startswith("<b>pass explorer: ")
    assert "<b>baseline</b>: every pass off" in got["graph"]


def test_live_widget_speaks_chinese_with_graphopt_lang(block, monkeypatch):
    monkeypatch.setenv("GRAPHOPT_LANG", "zh")
    ex = widgets.explore(*block[:1], *block[1], prefetch=False, static=False)
    got = _labels(ex)
    zh = widget.LABELS["zh"]
    assert {k: got[k] for k in ENGLISH} == {k: zh[k] for k in ENGLISH}
    assert got["header"].startswith("<b>Pass 探索器：")
    assert zh["base_caption"] in got["graph"] and "<b>baseline</b>" not in got["graph"]
    assert ex.status.value == zh["press"]


def test_every_label_has_both_languages():
    assert widget.LABELS["en"].keys() == widget.LABELS["zh"].keys()
    for text in widget.LABELS["zh"].values():
        assert re.search("[\u4e00-\u9fff]", text), text


@pytest.fixture(scope="module")
def static_page(block) -> tuple[str, str]:
    """One static explorer's page (no lang attribute) and its element id."""
    ex = widgets.explore(*block[:1], *block[1], static=True)
    uid = re.search(r'class="graphopt-static-explorer" id="([^"]+)"', ex.html)[1]
    return ex.page(), uid


_TEXT = """uid => {
    const root = document.getElementById(uid);
    return {text: root.innerText, reset: document.getElementById(uid + "-reset")
            .textContent, heads: [...root.querySelectorAll("thead th")]
            .map(th => th.textContent)};
}"""


@pytest.mark.browser
@pytest.mark.parametrize("lang", [None, "en", "zh-CN"])
def test_static_fragment_follows_the_pages_language(static_page, lang, chromium,
                                                    tmp_path):
    page_html, uid = static_page
    if lang is not None:
        page_html = page_html.replace("<html>", f'<html lang="{lang}">', 1)
    (tmp_path / "index.html").write_text(page_html, encoding="utf-8")
    page = chromium.new_page()
    log = watch(page)
    with serve(tmp_path) as base:
        page.goto(base + "index.html")
        page.wait_for_selector(f"#{uid}[data-ready='1']")
        got = page.evaluate(_TEXT, uid)
    page.close()
    log.assert_clean("static explorer page")
    zh = static_fragment.ZH_LABELS
    if lang == "zh-CN":
        assert got["reset"] == zh["reset"] and got["heads"] == zh["heads"]
        for text in (zh["rows"]["nodes"], zh["rows"]["kernels"], "应用勾选的 Pass 之后",
                     "所有 Pass 均关闭", "预先算好了"):
            assert text in got["text"], text
        assert "operator nodes (boxes)" not in got["text"]
        assert not re.search(r"\b(new|rewritten|removed) \(\d", got["text"])
        assert "changes nothing on this model" not in got["text"]
        diff = static_fragment.changes.TEXT["zh"]
        assert diff["same"] in got["text"] or diff["new"] + "（" in got["text"]
        for why in static_fragment.changes.NOTHING.values():
            assert why not in got["text"], why
    else:
        assert got["reset"] == "reset"
        assert got["heads"] == ["metric", "baseline (no passes)", "selected",
                                "selected / baseline"]
        assert "operator nodes (boxes)" in got["text"]
        assert not re.search("[\u4e00-\u9fff]", got["text"])



# ---- the notes, legends and charts (issue 25, second part)

def test_every_chinese_table_has_the_english_keys():
    from graphopt.explorer import changes, plots
    assert changes.NOTHING_ZH.keys() == changes.NOTHING.keys()
    assert changes.TEXT["zh"].keys() == changes.TEXT["en"].keys()
    assert plots.TEXT["zh"].keys() == plots.TEXT["en"].keys()
    assert list(plots.ROWS_ZH) == [m for m, _ in plots.ROWS]
    for text in [*changes.NOTHING_ZH.values(), *plots.ROWS_ZH.values()]:
        assert re.search("[\u4e00-\u9fff]", text), text


def _idle_pass(ex) -> str:
    """A pass that changes nothing on the model, ticked alone."""
    for p in ex.engine.passes:
        if ex.engine.result((p,)).signature == ex.engine.result(()).signature:
            return p
    pytest.skip("every pass changes this model")


def test_live_widget_notes_and_table_follow_graphopt_lang(block, monkeypatch):
    from graphopt.explorer import changes, plots
    monkeypatch.setenv("GRAPHOPT_LANG", "zh")
    ex = widgets.explore(*block[:1], *block[1], prefetch=False, static=False)
    p = _idle_pass(ex)
    ex.select([p])
    assert changes.NOTHING_ZH[p] in ex.notes.value
    assert "changed nothing here" not in ex.notes.value
    assert plots.ROWS_ZH["kernels"] in ex.numbers.value
    assert "kernel launches" not in ex.numbers.value
    assert "未测量" in ex.numbers.value and plots.NODES_NOTE_ZH in ex.numbers.value
    assert "与基线相同的图" in ex.graph.value


def test_chinese_plot_titles_are_drawn_in_a_cjk_font():
    from graphopt.explorer import plots
    if i18n.cjk_font() is None:
        pytest.skip("no CJK font on this machine: the charts stay English")
    nums = {"time": (None, None), "bytes_moved": (4096, 2048), "kernels": (5, 3),
            "peak_bytes": (8192, 4096)}
    zh, en = plots.plot_png(nums, "zh"), plots.plot_png(nums, "en")
    assert zh.startswith(b"\x89PNG") and zh != en


def test_english_notes_and_legend_are_as_before(block, monkeypatch):
    from graphopt.explorer import changes
    monkeypatch.delenv("GRAPHOPT_LANG", raising=False)
    ex = widgets.explore(*block[:1], *block[1], prefetch=False, static=False)
    p = _idle_pass(ex)
    assert changes.idle_notes(ex.engine, [p])[0] == (
        f"{p}: changed nothing here ({changes.NOTHING[p]})")
    d = changes.Diff(new=["a"], changed=[], removed=["b", "c"])
    legend = changes.legend_html(d)
    # the words, in the page's own text colour; the keys are outlined swatches
    assert re.sub(r"<[^>]+>", "", legend) == (
        "new (1) &nbsp; rewritten (0) &nbsp; removed (2): b, c")
    assert legend.startswith("<div class='gox-diff'><span class='gox-key-new'>")
    assert legend.count("aria-hidden='true'") == 2 and "color:" not in legend
    assert changes.legend_html(changes.Diff()) == (
        "<div class='gox-diff'>same graph as the baseline</div>")
