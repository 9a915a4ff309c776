"""What the library prints beyond the verdicts, in the reader's language.

The capture table and its notes (chapter 2), the drawings' alt text and legend,
chapter 7's saving rows and the passes' notes: English as before by default, Chinese
with GRAPHOPT_LANG=zh, and the Chinese book's saved outputs (the English ones put
through tools/i18n/outputs.py) equal to what a Chinese run prints, modulo whitespace
(as the zh nbval leg compares them).
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import pytest
import torch

import graphopt
from graphopt import i18n
from graphopt.compare.fresh_inputs import check_row
from graphopt.compare.methods import _eager
from graphopt.compare.seed_table import _branch, _built, _prints
from graphopt.compare.table import CaptureRow, CaptureTable
from graphopt.functionalization import functionalize_graph
from graphopt.peers.attribution import Step

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from i18n import outputs  # noqa: E402


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _guard_failed(x):
    raise AssertionError("Guard failed: x.size()[0] == 3")


def _rows() -> CaptureTable:
    """An eager row, a silently wrong one and one that raises on fresh inputs."""
    eager = _eager(torch.nn.ReLU(), (torch.ones(2),), None)
    wrong = CaptureRow("torch.jit.trace", captured=True, module=lambda x: x + 1,
                       nodes=1)
    raises = CaptureRow("torch.export(strict=False)", captured=True,
                        module=_guard_failed, nodes=1)
    for row in (wrong, raises):
        check_row(row, [(torch.ones(2),)], [torch.ones(2)], 1e-4, 1e-5)
    return CaptureTable([eager, wrong, raises])


def _printed(lang: str, monkeypatch) -> str:
    """Lines a chapter prints from the library: notes, a drawing's alt text, the
    seed table's cells, ch. 7's saving rows."""
    monkeypatch.setenv("GRAPHOPT_LANG", lang)
    rows = _rows()
    broken = CaptureRow("torch.compile", captured=True, graph_breaks=1,
                        graphs=[None, None], nodes=3)
    gm = graphopt.capture(torch.nn.Sequential(torch.nn.Linear(2, 2),
                                              torch.nn.ReLU()), torch.ones(1, 2))
    drawing = graphopt.draw(gm, title="Linear -> ReLU, captured")
    steps = [Step("dead code", 0.001, -0.05, 0.05), Step("prepacked weights", 0.3,
                                                         0.2, 0.4),
             Step("layout (channels-last)", -0.087, -0.121, -0.013)]
    return "\n".join([r.note for r in rows] + [drawing.describe()]
                     + [_built(rows[0]), _prints(rows[0]), _branch(broken)]
                     + ["  " + str(s) for s in steps])


def test_english_output_is_as_before(monkeypatch):
    text = _printed("en", monkeypatch)
    assert text.splitlines()[:4] == [
        "no graph: ops run one by one as Python reaches them",
        "silently wrong on fresh inputs: differs from eager",
        "raises on fresh inputs: AssertionError: Guard failed: x.size()[0] == 3",
        'Graph drawing "Linear -> ReLU, captured": 6 nodes, 7 edges (trust the '
        "notebook, or run the cell, to see it)."]
    assert "  dead code                          0.1%  (-5.0% to 5.0%)  within noise" \
        in text
    assert "  layout (channels-last)            -8.7%  (-12.1% to -1.3%)  costs" in text
    assert "1 graph break: 2 graphs, Python decides" in text


def test_saved_english_outputs_translate_to_what_zh_prints(monkeypatch):
    english, chinese = _printed("en", monkeypatch), _printed("zh", monkeypatch)
    assert _squeezed(outputs.translate(english)) == _squeezed(chinese)
    for word in ("没有图", "图示", "个节点", "死代码", "至", "节省", "变慢", "在噪声范围内",
                 "边运行边构建", "图中断"):
        assert word in chinese, word


def test_capture_table_reads_in_chinese_with_columns_aligned(monkeypatch):
    monkeypatch.setenv("GRAPHOPT_LANG", "zh")
    rows = _rows()
    assert [r.verdict for r in rows] == ["reference", "WRONG", "raises"]  # checks
    assert [r.shown_verdict for r in rows] == ["参考", "错误", "抛出异常"]
    lines = repr(rows).splitlines()
    assert lines[0].split()[:3] == ["方法", "已捕获", "算子数"]
    # each column starts at the same display column on every line
    starts = [i18n.display_width(line[:line.index(cell)])
              for line, cell in zip(lines, ("新输入", "参考", "错误", "抛出异常"))]
    assert len(set(starts)) == 1, lines
    assert "color:#b00020'><b>错误</b>" in rows._repr_html_()
    monkeypatch.setenv("GRAPHOPT_LANG", "en")
    assert repr(rows).splitlines()[0].split()[:3] == ["method", "captured", "ops"]
    assert "<b>WRONG</b>" in rows._repr_html_()


def test_drawing_legend_cluster_and_hint_in_chinese(monkeypatch):
    monkeypatch.setenv("GRAPHOPT_LANG", "zh")
    gm = graphopt.capture(torch.nn.Sequential(torch.nn.Linear(2, 2),
                                              torch.nn.ReLU()), torch.ones(1, 2))
    source = graphopt.draw(gm).source
    assert 'label="算子类别"' in source and 'legend_compute [label="计算"' in source
    assert "<title>" not in source and "计算图" in graphopt.draw(gm).describe()
    from graphopt.errors import DOT_INSTALL_HINT
    assert "conda install" in i18n._(DOT_INSTALL_HINT)
    assert i18n._(DOT_INSTALL_HINT).startswith("渲染图示需要")


@pytest.mark.parametrize("text", [
    "the whole graph (2 ops)  the whole graph (3 ops)",
    "<td>the whole graph (2 ops)</td><td>the whole graph (3 ops)</td>"])
def test_a_field_stops_at_a_tables_column(text):
    assert outputs.translate(text).count("整张图") == 2


def test_a_short_english_phrase_with_a_context_is_no_pattern():
    """"fails: {error}" (the seed table's cell) must not translate a notebook's own
    'load_state_dict fails:' line, which a Chinese run prints in English."""
    line = "module-level graph  : load_state_dict fails:\n    Error(s) in loading"
    assert outputs.translate(line) == line


def test_functionalization_note_is_english_data_shown_in_chinese(monkeypatch):
    monkeypatch.setenv("GRAPHOPT_LANG", "zh")
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_function(torch.ops.aten.add_.Tensor, (x, 1)))
    notes = functionalize_graph(g)[2]
    assert notes == ["functionalize: kept add__tensor (writes an input the caller "
                     "sees)"]
    assert i18n.translated(notes[0]) == "functionalize：保留了 add__tensor（写入了调用者可见的输入）"


def test_a_saved_drawing_gets_the_librarys_words_in_place(monkeypatch):
    """The legend, a fused group's cluster title and a default title of an English
    SVG read in Chinese; node names (the graph's own words) stay."""
    from graphopt.passes import fuse_elementwise

    class Chain(torch.nn.Module):
        def forward(self, x):
            return (torch.relu(x) * 2 + 1).sum()

    monkeypatch.setenv("GRAPHOPT_LANG", "en")
    gm = fuse_elementwise(graphopt.capture(Chain(), torch.ones(4, 4))).module
    svg = graphopt.draw(gm).svg()
    assert "op kind" in svg and "(fused: 1 kernel)" in svg
    zh = outputs.translate_svg(svg)
    assert ">算子类别<" in zh and ">逐元素<" in zh and ">归约<" in zh
    assert "（融合：1 个核函数）" in zh and "<title>计算图</title>" in zh
    assert "op kind" not in zh and "fused: 1 kernel" not in zh
    assert zh.count(">relu<") == svg.count(">relu<") > 0


def test_the_memory_hierarchy_reads_in_chinese_saved_and_live(monkeypatch):
    """Every line of the concept figure is a message: a Chinese run draws it in
    Chinese, and the saved English SVG gets the same lines in place."""
    from graphopt.figures import memory_hierarchy

    monkeypatch.setenv("GRAPHOPT_LANG", "en")
    english = memory_hierarchy()
    svg = english.svg()
    monkeypatch.setenv("GRAPHOPT_LANG", "zh")
    chinese = memory_hierarchy()
    assert chinese.describe() == outputs.translate(english.describe())
    saved = outputs.translate_svg(svg)
    lines = re.findall(r"<text[^>]*>([^<]*)</text>", saved)
    assert len(lines) == 18 and all(re.search("[\u4e00-\u9fff]", s) for s in lines)
    live = re.findall(r"<text[^>]*>([^<]*)</text>", chinese.svg())
    # the same words, laid out at other widths (Graphviz writes "-" as &#45;)
    assert [html.unescape(s) for s in lines] == [html.unescape(s) for s in live]
