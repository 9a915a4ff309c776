"""The Chinese book in JupyterLab (issue 25): `make lab LANG=zh` opens it executed.

The Chinese chapters are rendered (tools/i18n) into a temporary folder, JupyterLab
serves it on 127.0.0.1 and Chromium opens chapter 3 without running a cell: the
headings and prose are Chinese, the saved outputs are the English chapter's (graphs
drawn as SVG, as many outputs as in English), and no request leaves the machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from browser import BOOK, PYTHON, chromium, jupyterlab, screenshot_path, watch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from i18n import book  # noqa: E402

pytestmark = pytest.mark.browser
__all__ = ["chromium"]  # the session fixture, imported for pytest

CHAPTER = "03_constant_folding.ipynb"

PAGE_JS = """
() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.widgets;
  return {
    headings: [...document.querySelectorAll('.jp-MarkdownOutput h1, .jp-MarkdownOutput h2')]
      .map(h => h.textContent),
    outputs: cells.filter(c => c.model.type === 'code')
      .map(c => c.model.outputs.length > 0),
    svgs: document.querySelectorAll('.jp-OutputArea-output svg, '
      + '.jp-OutputArea-output[data-mime-type="image/svg+xml"] img').length,
  };
}
"""


def test_chinese_chapter_opens_executed_in_jupyterlab(chromium, tmp_path):
    reports = book.render_all([CHAPTER[:2], "glossary"], tmp_path)
    assert all(not r.untranslated for r in reports), [r.summary() for r in reports]
    english = json.loads((BOOK / CHAPTER).read_text(encoding="utf-8"))
    expected = [bool(c.get("outputs")) for c in english["cells"]
                if c["cell_type"] == "code"]
    # Lab renders saved SVG only in a trusted notebook: trust it as `make lab` does.
    subprocess.run([str(PYTHON), "-m", "jupyter", "trust", str(tmp_path / CHAPTER)],
                   check=True, capture_output=True)
    with jupyterlab(tmp_path) as lab:
        context = chromium.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        log = watch(page)
        page.goto(lab.open_url(CHAPTER))
        page.locator(".jp-NotebookPanel .jp-MarkdownOutput h1").first.wait_for(
            timeout=90_000)
        page.wait_for_timeout(1000)  # let the first outputs render
        got = page.evaluate(PAGE_JS)
        page.screenshot(path=str(screenshot_path("jupyterlab", "zh-" + CHAPTER + ".png")))
        context.close()
    assert "常量折叠" in got["headings"][0], got["headings"][:3]
    # the English chapter's saved outputs, in every cell that has them (Lab merges
    # consecutive stream outputs, so cells are compared, not outputs)
    assert got["outputs"] == expected
    assert got["svgs"] > 0, "no saved drawing shown"
    assert not log.external_requests
