"""The library's message catalog: what graphopt prints, in the reader's language.

graphopt.i18n reads src/graphopt/locale/zh_CN/LC_MESSAGES/graphopt.mo (stdlib
gettext) when GRAPHOPT_LANG starts with zh. The catalog must hold every string the
code wraps, each translated and reviewed, with the English placeholders, and the
committed .mo must be the .po compiled (tools/i18n/messages.py checks; the fixture
tests break one thing each and see the check fail).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po, write_po

from graphopt import i18n
from graphopt.measure.report import from_times

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "graphopt"
sys.path.insert(0, str(ROOT / "tools"))

from i18n import messages  # noqa: E402


def test_library_catalog_is_complete_and_compiled():
    problems = messages.problems([SRC], i18n.LOCALE_DIR, i18n.DOMAIN)
    assert not problems, "\n".join(problems[:60]) + "\n(make library-catalog)"


@pytest.fixture
def copy(tmp_path) -> tuple[Path, Path]:
    """A copy of the catalog and of one wrapped source file."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(SRC / "measure" / "report.py", src / "report.py")
    shutil.copytree(i18n.LOCALE_DIR, tmp_path / "locale")
    return src, tmp_path / "locale"


def _edit(locale: Path, change, compile_mo: bool = True) -> None:
    po_path, mo_path = messages.catalog_paths(locale, i18n.DOMAIN)
    with po_path.open("rb") as f:
        po = read_po(f)
    change(po)
    with po_path.open("wb") as f:
        write_po(f, po)
    if compile_mo:
        with mo_path.open("wb") as f:
            write_mo(f, po)


def _only_report(problems: list[str]) -> list[str]:
    """The fixture holds one source file: every other entry reads as stale."""
    return [p for p in problems if not p.startswith("stale")]


def test_the_copy_passes(copy):
    assert _only_report(messages.problems([copy[0]], copy[1], i18n.DOMAIN)) == []


def test_a_new_wrapped_string_is_missing(copy):
    src, locale = copy
    with (src / "report.py").open("a") as f:
        f.write('\nNEW = _("a sentence nobody translated")\n')
    got = _only_report(messages.problems([src], locale, i18n.DOMAIN))
    assert got == ["missing: 'a sentence nobody translated' is wrapped in the code "
                   "but not in graphopt.po"]


def test_fuzzy_empty_and_wrong_placeholders_fail(copy):
    src, locale = copy

    def change(po):
        po["faster"].flags.add("fuzzy")
        po["slower"].string = ""
        po["measured on {where}"].string = "测量环境：{place}"
    _edit(locale, change)
    got = _only_report(messages.problems([src], locale, i18n.DOMAIN))
    assert "fuzzy (not reviewed): 'faster'" in got
    assert "untranslated: 'slower'" in got
    assert "placeholders differ: 'measured on {where}'" in got


def test_a_mo_compiled_from_an_older_po_fails(copy):
    src, locale = copy
    _edit(locale, lambda po: setattr(po["faster"], "string", "更快"),
          compile_mo=False)
    got = _only_report(messages.problems([src], locale, i18n.DOMAIN))
    assert len(got) == 1 and "graphopt.mo differs from the .po" in got[0]


def test_english_by_default_chinese_with_graphopt_lang(monkeypatch):
    monkeypatch.delenv("GRAPHOPT_LANG", raising=False)
    assert i18n.language() == "en" and i18n._("faster") == "faster"
    monkeypatch.setenv("GRAPHOPT_LANG", "zh_CN.UTF-8")
    assert i18n.language() == "zh" and i18n._("faster") == "快"
    assert i18n.gettext_in("en", "faster") == "faster"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_verdict_holds_its_word_in_each_language(lang, monkeypatch):
    """A check reads a verdict with _("within noise"), _("faster"), _("slower")."""
    monkeypatch.setenv("GRAPHOPT_LANG", lang)
    from graphopt.measure.report import Comparison
    fast = from_times("fused", [1.0, 1.1, 1.2, 1.3], "cpu", 1)
    slow = from_times("eager", [2.0, 2.1, 2.2, 2.3], "cpu", 1)
    near = from_times("near", [1.05, 1.15, 1.25, 1.35], "cpu", 1)
    cmp = Comparison({"fused": fast, "eager": slow, "near": near}, [], 1)
    assert i18n._("faster") in cmp.verdict("fused", "eager")
    assert i18n._("slower") in cmp.verdict("eager", "fused")
    assert i18n._("within noise") in cmp.verdict("fused", "near")
    assert (i18n._("within noise") in cmp.verdict("fused", "eager")) is False
    assert cmp.verdict("fused", "eager").startswith("fused")
    if lang == "zh":
        assert "中位数" in str(fast) and cmp.conditions.startswith("测量环境")


def test_pass_notes_catalog_is_complete_and_compiled():
    problems = messages.problems([SRC], i18n.LOCALE_DIR, "notes",
                                 messages.NOTE_KEYWORDS)
    assert not problems, "\n".join(problems[:60]) + "\n(make library-catalog)"


def test_a_note_is_english_data_that_a_display_translates(monkeypatch):
    """Tests and the book's checks read notes as English strings in either
    language; the explorer shows them with `translated`."""
    import torch
    from torch import nn

    from graphopt import capture
    from graphopt.passes import fold_constants

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))

        def forward(self, x):
            return x * self.w.t()

    monkeypatch.setenv("GRAPHOPT_LANG", "zh")
    model = Scaled().train()
    notes = fold_constants(capture(model, torch.ones(3), level="module")).notes
    assert notes == ["fold_constants: kept t (reads parameter w: training mode)"]
    assert i18n.translated(notes[0]) == "fold_constants：保留了 t（读取参数 w：训练模式）"
    assert i18n.translated(notes[0], "en") == notes[0]
    assert i18n.translated("plain text") == "plain text"


def _printed(lang: str, monkeypatch) -> str:
    """What a chapter's timing cell prints, in `lang`: timings, a verdict (inside a
    notebook's own f-string, then wrapped), the conditions line, a model check."""
    import textwrap

    from graphopt.measure.perf_model import error_verdict
    from graphopt.measure.report import Comparison
    monkeypatch.setenv("GRAPHOPT_LANG", lang)
    fast = from_times("fused", [1.0, 1.1, 1.2, 1.3], "cpu", 2)
    slow = from_times("eager", [2.0, 2.1, 2.2, 2.3], "cpu", 1)
    near = from_times("near", [1.05, 1.15, 1.25, 1.35], "cuda", None)
    cmp = Comparison({"fused": fast, "eager": slow, "near": near}, [], 2,
                     loads=(1.0, 2.0))
    return "\n".join([str(cmp), f"on cpu: {cmp.verdict('fused', 'eager')}; so",
                      textwrap.fill(cmp.verdict("fused", "near"), 40),
                      cmp.conditions, "baseline: " + error_verdict(1.0, 2.0)])


def test_saved_english_outputs_translate_to_what_zh_prints(monkeypatch):
    """The Chinese book's saved outputs (tools/i18n/outputs.py) equal a live run's
    with GRAPHOPT_LANG=zh, modulo whitespace (the zh nbval leg's sanitizer)."""
    import re

    from i18n import outputs
    english, chinese = _printed("en", monkeypatch), _printed("zh", monkeypatch)
    saved = outputs.translate(english)
    assert re.sub(r"\s+", "", saved) == re.sub(r"\s+", "", chinese)
    assert "baseline: " in saved and "; so" in saved  # the notebook's own words
    assert outputs.translate("baseline\nfaster") == "baseline\nfaster"  # lone words
