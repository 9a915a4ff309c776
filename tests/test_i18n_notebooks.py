"""The Chinese notebooks (tools/i18n, issue 25): blocks as Sphinx finds them, code kept.

The tool must find exactly the blocks Sphinx's gettext builder puts in the catalogs
(else a translation never reaches the notebook), must leave every code cell, output
and metadata byte for byte, and must say which blocks stayed English.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from i18n import blocks, book, catalog, outputs  # noqa: E402
from i18n.notebooks import (  # noqa: E402
    markdown_sources,
    msgids,
    translate_notebook,
    translate_text,
)

CHAPTERS = sorted((ROOT / "book").glob("0*.ipynb"))


def test_parser_has_the_books_myst_extensions():
    tree = ast.parse((ROOT / "book" / "conf.py").read_text())
    value = next(node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                 and getattr(node.targets[0], "id", "") == "myst_enable_extensions")
    assert set(ast.literal_eval(value)) == set(blocks.MYST_EXTENSIONS)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_blocks_are_the_catalogs_msgids(chapter):
    """Every block found is an entry of the chapter's catalog, and every entry of the
    catalog that comes from markdown is found (the rest are outputs' text)."""
    nb = json.loads(chapter.read_text(encoding="utf-8"))
    found = set(msgids(nb))
    entries = {m.id for m in catalog.read(book.LOCALES / f"{chapter.stem}.po") if m.id}
    assert found - entries == set(), "blocks missing from the catalog (run gettext)"
    prose = " ".join(" ".join(text.split()) for text in markdown_sources(nb))
    for entry in entries - found:  # an output's text (a table, LaTeX), not a cell's
        assert " ".join(entry.split())[:40] not in prose, entry


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_untranslated_chapter_is_the_english_file(chapter):
    raw = chapter.read_text(encoding="utf-8")
    text, report = translate_notebook(raw, lambda _: None, chapter.name)
    assert text == raw
    assert report.translated == 0 and len(report.untranslated) == len(
        msgids(json.loads(raw)))


SOURCE = """\
## 1.2 A heading

A paragraph that runs over
two lines, with `code`.

1. a first item
   that continues
2. a second item

| op | bound |
| --- | --- |
| `relu` | memory \\| bandwidth |

:::{dropdown} Solution
:open:
Hidden prose.
:::
"""
ZH = {"1.2 A heading": "1.2 一个标题",
      "A paragraph that runs over two lines, with `code`.": "一个段落，带 `code`。",
      "a first item that continues": "第一项\n接着写",
      "memory | bandwidth": "内存 | 带宽", "Solution": "参考解答",
      "Hidden prose.": "隐藏的文字。"}


def test_blocks_of_every_kind_are_found_and_replaced():
    found = [b.msgid for b in blocks.find_blocks(SOURCE)]
    assert found == ["1.2 A heading", "A paragraph that runs over two lines, with "
                     "`code`.", "a first item that continues", "a second item", "op",
                     "bound", "`relu`", "memory | bandwidth", "Solution", "Hidden prose."]
    out = translate_text(SOURCE, ZH.get)
    assert out.startswith("## 1.2 一个标题\n\n一个段落，带 `code`。\n\n1. 第一项\n   接着写\n"
                          "2. a second item\n")
    assert "| `relu` | 内存 \\| 带宽 |" in out
    assert ":::{dropdown} 参考解答\n:open:\n隐藏的文字。\n:::" in out
    # the result parses into the same blocks, now in Chinese
    again = [b.msgid for b in blocks.find_blocks(out)]
    assert again[:3] == ["1.2 一个标题", "一个段落，带 `code`。", "第一项 接着写"]
    assert again[7:] == ["内存 | 带宽", "参考解答", "隐藏的文字。"]


def _notebook(markdown: str) -> str:
    code = {"cell_type": "code", "execution_count": 3, "id": "c1",
            "metadata": {"tags": ["nbval-ignore-output"]}, "source": ["x = 1\n", "x"],
            "outputs": [{"data": {"text/plain": ["1"]}, "execution_count": 3,
                         "metadata": {}, "output_type": "execute_result"}]}
    md = {"cell_type": "markdown", "id": "m1", "metadata": {"tags": ["keep"]},
          "source": markdown.splitlines(keepends=True)}
    nb = {"cells": [md, code], "metadata": {"kernelspec": {"name": "python3"}},
          "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def test_notebook_keeps_code_outputs_and_metadata_and_reports_the_rest():
    raw = _notebook(SOURCE)
    text, report = translate_notebook(raw, ZH.get, "fixture.ipynb")
    before, after = json.loads(raw), json.loads(text)
    assert after["cells"][1] == before["cells"][1]
    assert after["metadata"] == before["metadata"]
    assert after["cells"][0]["metadata"] == before["cells"][0]["metadata"]
    assert "一个段落，带 `code`。" in "".join(after["cells"][0]["source"])
    assert report.translated == 6
    assert report.untranslated == ["a second item", "op", "bound", "`relu`"]
    assert "6 of 10 blocks translated, 4 left in English" in report.summary()


def test_a_block_the_catalog_does_not_know_stays_english_and_is_counted(tmp_path):
    """An English paragraph added after the catalog: reported, not lost."""
    po = tmp_path / "page.po"
    catalog.update(po, ["1.2 A heading"])
    entries = catalog.read(po)
    entries["1.2 A heading"].string = "1.2 一个标题"
    fuzzy = "A paragraph that runs over two lines, with `code`."
    entries.add(fuzzy, "旧的译文", flags=["fuzzy"])  # English changed, not reviewed
    reviewed = catalog.reviewed(entries)
    assert reviewed == {"1.2 A heading": "1.2 一个标题"}
    _, report = translate_notebook(_notebook(SOURCE), reviewed.get)
    assert report.translated == 1 and fuzzy in report.untranslated
    assert len(report.untranslated) == 9


def test_render_writes_the_book_folder(tmp_path):
    reports = book.render_all(["05"], tmp_path)
    assert [r.name for r in reports] == ["05_writing_a_pass.ipynb"]
    zh = json.loads((tmp_path / "05_writing_a_pass.ipynb").read_text(encoding="utf-8"))
    en = json.loads((ROOT / "book" / "05_writing_a_pass.ipynb").read_text())
    code = [c for c in en["cells"] if c["cell_type"] == "code"]
    for cell in code:  # the same code and metadata; what graphopt printed, in Chinese
        outputs.translate_outputs(cell)
    assert [c for c in zh["cells"] if c["cell_type"] == "code"] == code
    assert "图示“Gate, captured”" in json.dumps(code, ensure_ascii=False)
    with pytest.raises(SystemExit, match="no page of book/ starts with"):
        book.render_all(["99"], tmp_path)


def _make(*args: str) -> str:
    """What `make -n` would run (the recipes, printed, not run)."""
    done = subprocess.run(["make", "-n", "--no-print-directory", *args],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lab_lang_zh_opens_the_chinese_book_with_a_valid_locale(tmp_path):
    zh, en = _make("lab", "LANG=zh"), _make("lab")
    assert "tools/zh_notebooks.py book" in zh
    assert "--ServerApp.root_dir=book/_build/notebooks_zh" in zh
    assert "GRAPHOPT_LANG=zh" in zh and "GRAPHOPT_LANG" not in en
    assert "--ServerApp.root_dir=book\n" in en and "zh_notebooks" not in en
    # LANG=zh on make's command line reaches every recipe: there it is a valid locale
    probe = tmp_path / "probe.mk"
    probe.write_text(f"probe:\n\t@echo LANG=$$LANG\ninclude {ROOT / 'Makefile'}\n")
    done = subprocess.run(["make", "--no-print-directory", "-f", str(probe), "probe",
                           "LANG=zh"], cwd=ROOT, capture_output=True, text=True)
    assert done.stdout.strip() == "LANG=C.UTF-8", done.stdout + done.stderr


def test_a_changed_english_block_keeps_its_translation_as_an_unreviewed_draft(tmp_path):
    po = tmp_path / "lab.po"
    old = "Write `levels(gm)` returning a dict from each operator to its level."
    catalog.update(po, ["Task 1.4: levels", old])
    entries = catalog.read(po)
    entries["Task 1.4: levels"].string = "Task 1.4：层级"
    entries[old].string = "编写 `levels(gm)`，返回从每个算子到其层级的字典。"
    catalog.write(po, entries)
    changed = old.replace("each operator", "each operator node")
    catalog.update(po, ["Task 1.4: levels", changed, "A new paragraph."])
    again = catalog.read(po)
    assert again[changed].fuzzy and again[changed].string.startswith("编写")
    assert again["A new paragraph."].string == "" and old not in again
    assert catalog.reviewed(again) == {"Task 1.4: levels": "Task 1.4：层级"}
    before = po.read_bytes()
    catalog.update(po, ["Task 1.4: levels", changed, "A new paragraph."])
    assert po.read_bytes() == before  # a rerun changes nothing
