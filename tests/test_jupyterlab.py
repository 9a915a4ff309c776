"""JupyterLab end to end: open chapter 1 in a real Chromium, Run All, no error, a graph.

The test starts JupyterLab on 127.0.0.1 on a temporary copy of book/ (so the repository's
saved outputs are never touched), opens the chapter, clears its outputs, runs every cell
from the Run menu, waits for the kernel to go idle and then checks, cell by cell, that only
cells tagged `raises-exception` show an error, that every code cell ran, and that a graph
drawn as SVG is on the page. It stops the server by the PID it started.
"""

from __future__ import annotations

import re
import shutil
import time
import warnings

import pytest

from browser import (  # noqa: F401 - chromium is a fixture
    BOOK,
    chromium,
    jupyterlab,
    screenshot_path,
    watch,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHAPTER = "01_graphs_and_operators.ipynb"
RUN_ALL_TIMEOUT_S = 300  # a chapter must run in < 90 s on 2 cores; leave room

# Reads the notebook model of the current Lab tab: one record per code cell.
CELLS_JS = """
() => {
  const panel = window.jupyterapp.shell.currentWidget;
  return panel.content.widgets
    .filter(c => c.model.type === 'code')
    .map((c, i) => ({
      index: i,
      source: c.model.sharedModel.getSource(),
      tags: c.model.getMetadata('tags') || [],
      count: c.model.executionCount,
      errors: c.model.outputs.toJSON()
        .filter(o => o.output_type === 'error')
        .map(o => `${o.ename}: ${o.evalue}`),
    }));
}
"""

# True once the kernel is idle and no cell is queued or running ("[*]").
# Run All is done when the kernel is idle and, in the notebook model (not the DOM,
# which renders only the cells near the viewport), every code cell with source has run
# or a cell shows an untagged error (Run All stops there). The DOM's "[*]" prompts miss
# queued cells scrolled out of view, and the kernel is idle for a moment between cells.
DONE_JS = """
() => {
  const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const kernel = panel && panel.sessionContext.session && panel.sessionContext.session.kernel;
  if (!kernel || kernel.status !== 'idle') return false;
  const code = panel.content.widgets.filter(c => c.model.type === 'code'
    && c.model.sharedModel.getSource().trim());
  const tagged = c => (c.model.getMetadata('tags') || []).includes('raises-exception');
  const failed = code.some(c => !tagged(c)
    && c.model.outputs.toJSON().some(o => o.output_type === 'error'));
  return failed || code.every(c => c.model.executionCount !== null);
}
"""

KERNEL_IDLE_JS = """
() => {
  const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const kernel = panel && panel.sessionContext && panel.sessionContext.session
    && panel.sessionContext.session.kernel;
  return !!kernel && kernel.status === 'idle';
}
"""


def _chapter_to_open() -> str:
    """Chapter 1; while it is being written, any chapter that exists (with a warning)."""
    if (BOOK / CHAPTER).exists():
        return CHAPTER
    others = sorted(p.name for p in BOOK.glob("0*.ipynb"))
    if not others:
        pytest.fail(f"book/{CHAPTER} does not exist and neither does any other chapter")
    warnings.warn(f"book/{CHAPTER} is missing; testing {others[0]} instead", stacklevel=1)
    return others[0]


def _menu(page, menu: str, command: str) -> None:
    """Click `menu` in Lab's menu bar, then the item that runs `command`."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu}$")).click()
    page.locator(f'.lm-Menu-item[data-command="{command}"]').first.click()


def test_chapter_runs_in_jupyterlab(chromium, tmp_path):
    name = _chapter_to_open()
    root = tmp_path / "book"
    shutil.copytree(
        BOOK, root,
        ignore=shutil.ignore_patterns("_build", "jupyter_execute", ".ipynb_checkpoints"),
    )
    with jupyterlab(root) as lab:
        context = chromium.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        log = watch(page)
        page.goto(lab.open_url(name))
        page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").first.wait_for(timeout=90_000)
        page.wait_for_function(KERNEL_IDLE_JS, timeout=90_000)

        # Fresh start: no saved output or execution count can pass for a new one.
        _menu(page, "Edit", "editmenu:clear-all")
        assert page.evaluate("() => document.querySelectorAll("
                             "'.jp-OutputArea-output').length") == 0
        start = time.monotonic()
        _menu(page, "Run", "runmenu:run-all")
        page.wait_for_function(DONE_JS, timeout=RUN_ALL_TIMEOUT_S * 1000, polling=500)
        elapsed = time.monotonic() - start
        page.wait_for_timeout(500)  # let the last outputs render
        cells = page.evaluate(CELLS_JS)
        page.screenshot(path=str(screenshot_path("jupyterlab", name + ".png")))

        svgs = page.evaluate("""
            () => [...document.querySelectorAll(
                '.jp-OutputArea-output[data-mime-type="image/svg+xml"] img, '
                + '.jp-OutputArea-output[data-mime-type="image/svg+xml"] svg, '
                + '.jp-OutputArea-output[data-mime-type="text/html"] svg')]
              .map(e => { const r = e.getBoundingClientRect();
                          return {w: r.width, h: r.height}; })
        """)
        first = page.locator('.jp-OutputArea-output[data-mime-type="image/svg+xml"]').first
        if first.count():
            first.scroll_into_view_if_needed()
            page.screenshot(path=str(screenshot_path("jupyterlab", name + ".graph.png")))
        context.close()

    print(f"{name}: {len(cells)} code cells ran in {elapsed:.1f} s in JupyterLab")
    ran = [c for c in cells if c["source"].strip()]
    not_run = [c["index"] for c in ran if c["count"] is None]
    assert not not_run, f"{name}: code cells that did not run (Run All stopped?): {not_run}"

    unexpected = [(c["index"], c["errors"]) for c in cells
                  if c["errors"] and "raises-exception" not in c["tags"]]
    assert not unexpected, f"{name}: cells show an error: {unexpected}"
    tagged = [c["index"] for c in cells if "raises-exception" in c["tags"]]
    silent = [c["index"] for c in cells
              if "raises-exception" in c["tags"] and not c["errors"]]
    assert not silent, f"{name}: cells tagged raises-exception did not raise: {silent}"
    errors_shown = sum(len(c["errors"]) for c in cells)
    assert errors_shown == len(tagged), (errors_shown, tagged)

    drawn = [s for s in svgs if s["w"] > 0 and s["h"] > 0]
    assert drawn, f"{name}: no graph SVG drawn on the page ({svgs})"
    external = log.external_requests
    assert not external, f"JupyterLab requested hosts other than 127.0.0.1: {external}"
