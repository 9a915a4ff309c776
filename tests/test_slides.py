"""The chapters' slide decks (tools/site/slides.py, `make slides`) in a real Chromium.

Seven English and seven Chinese decks, built offline into a temporary folder and served
from 127.0.0.1: at 1280x720 every slide fits (nothing cut at any edge, nothing
scrolls), no text is under 18 px, every slide has speaker notes and every figure
alt text, nothing is requested from another host, no console error, and axe-core
finds no serious or critical violation. The pass explorer works on its slide without
a kernel: ticking a box (by mouse or by keyboard, with a visible focus ring) changes
the slide's numbers. Without a browser: a cell tagged `slides` becomes its section's
slide, and every cell tools/site/slide_tags.py tags exists in its chapter.
"""

from __future__ import annotations

import base64
import copy
import json
import shutil
import sys

import pytest

from browser import BOOK, ROOT, chromium, serve, watch  # noqa: F401 - a fixture

sys.path.insert(0, str(ROOT / "tools" / "site"))
import axe_audit  # noqa: E402
import slide_tags  # noqa: E402
import slides  # noqa: E402

BROWSER = [pytest.mark.browser, pytest.mark.slow]
SIZE = {"width": 1280, "height": 720}
MIN_PX = 18
CHAPTERS = sorted(p.stem for p in BOOK.glob("0*.ipynb"))

# Per slide: its box, what sticks out of it, text under MIN_PX, notes and alt text.
_MEASURE = """() => {
  const s = Reveal.getCurrentSlide(), box = s.getBoundingClientRect();
  const out = [], small = [];
  for (const el of s.querySelectorAll('*')) {
    if (el.closest('aside.notes')) continue;
    const r = el.getBoundingClientRect();
    if (!r.width && !r.height) continue;
    if (r.right > box.left + 1280 + 1 || r.bottom > box.top + 720 + 1 ||
        r.left < box.left - 1 || r.top < box.top - 1)
      out.push(el.tagName + ' ' + (el.textContent || el.alt || '').slice(0, 50));
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    // an inline drawing (the explorer's graph) is shrunk to fit like a figure's
    // image, whose text is not measured either
    if (own && !el.closest('svg') && parseFloat(getComputedStyle(el).fontSize) < %d)
      small.push(el.tagName + ' ' + getComputedStyle(el).fontSize + ' '
                 + el.textContent.trim().slice(0, 40));
  }
  return {out, small, scrolls: s.scrollHeight > s.clientHeight + 1,
          notes: (s.querySelector('aside.notes') || {}).textContent || '',
          noalt: [...s.querySelectorAll('img')].filter(i => !i.alt).length,
          title: (s.querySelector('h1, h2') || {}).textContent || ''};
}""" % MIN_PX


@pytest.fixture(scope="module")
def decks(tmp_path_factory):
    """Every deck, both languages, built now (from the saved outputs: seconds)."""
    out = tmp_path_factory.mktemp("slides")
    written = slides.build(out)
    assert len(written) == 2 * len(CHAPTERS)
    return out


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("chapter", CHAPTERS)
@pytest.mark.browser
@pytest.mark.slow
def test_every_slide_fits_and_is_legible(chapter, lang, decks, chromium):
    context = chromium.new_context(viewport=SIZE)
    page = context.new_page()
    log = watch(page)
    problems = []
    with serve(decks / lang / "slides") as base:
        page.goto(f"{base}{chapter}.html")
        page.wait_for_function("window.Reveal && Reveal.isReady()")
        total = page.evaluate("Reveal.getTotalSlides()")
        assert total >= 4, f"{chapter} ({lang}): only {total} slides"
        for i in range(total):
            page.evaluate(f"Reveal.slide({i})")
            page.wait_for_timeout(50)
            got = page.evaluate(_MEASURE)
            where = f"{chapter} ({lang}) slide {i + 1} '{got['title'][:40]}'"
            if got["out"] or got["scrolls"]:
                problems.append(f"{where}: does not fit: {got['out'][:4]}")
            if got["small"]:
                problems.append(f"{where}: text under {MIN_PX} px: {got['small'][:4]}")
            if len(got["notes"].strip()) < 20:
                problems.append(f"{where}: no speaker notes")
            if got["noalt"]:
                problems.append(f"{where}: {got['noalt']} figure(s) without alt text")
        blocking = axe_audit.blocking(axe_audit.audit(page))
        problems += [f"{chapter} ({lang}): axe {v['impact']} {v['id']}: "
                     f"{v['nodes'][0]['html'][:100]}" for v in blocking]
    log.assert_clean(f"{chapter} ({lang})")
    context.close()
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------ the explorer's slide

EXPLORED = [c for c in CHAPTERS if '"explore(' in (BOOK / f"{c}.ipynb").read_text()
            or "graphopt.explore(" in (BOOK / f"{c}.ipynb").read_text()]


# true once the explorer's drawn combination is (0) or is not (1) the first box's
_TICKED = """off => {
  const ex = document.querySelector('section.explorer .graphopt-static-explorer');
  const first = ex.querySelector('input[type=checkbox]:not([disabled])');
  const bit = 1 << Number(first.id.split('-pass-')[1]);
  return ((Number(ex.dataset.combo) & bit) === 0) === Boolean(off);
}"""


def _numbers(page) -> str:
    return page.inner_text("section.explorer tbody")


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("chapter", EXPLORED)
@pytest.mark.browser
@pytest.mark.slow
def test_the_explorer_works_on_its_slide(chapter, lang, decks, chromium):
    """No kernel: the static explorer's boxes change the slide's numbers; the
    keyboard alone reaches a box, shows a focus ring, and Space ticks it."""
    assert len(EXPLORED) >= 3, f"the explorer is shown in only {EXPLORED}"
    context = chromium.new_context(viewport=SIZE)
    page = context.new_page()
    log = watch(page)
    with serve(decks / lang / "slides") as base:
        page.goto(f"{base}{chapter}.html")
        page.wait_for_function("window.Reveal && Reveal.isReady()")
        index = page.evaluate("[...document.querySelectorAll('.reveal .slides > "
                              "section')].findIndex(s => s.matches('.explorer'))")
        assert index > 0, f"{chapter} ({lang}): no explorer slide"
        page.evaluate(f"Reveal.slide({index})")
        page.wait_for_selector("section.explorer .graphopt-static-explorer"
                               "[data-ready='1']")
        box = "section.explorer input[type=checkbox]:not([disabled])"
        before = _numbers(page)
        page.click(box)
        page.wait_for_function(_TICKED, arg=0)
        ticked = _numbers(page)
        assert ticked != before, f"{chapter} ({lang}): ticking changed no number"
        page.click(box)  # off again, now by keyboard: focus it and press Space
        page.wait_for_function(_TICKED, arg=1)
        assert _numbers(page) == before
        page.focus(box)  # then reached by the keyboard: the ring is for keyboard focus
        page.keyboard.press("Shift+Tab")
        page.keyboard.press("Tab")
        assert page.evaluate(f"document.activeElement === document.querySelector("
                             f"'{box}')"), "Tab does not come back to the box"
        ring = page.evaluate("() => { const s = getComputedStyle(document."
                             "activeElement); return s.outlineStyle !== 'none' && "
                             "parseFloat(s.outlineWidth) >= 2; }")
        page.keyboard.press("Space")
        page.wait_for_function(_TICKED, arg=0)
        assert _numbers(page) == ticked, f"{chapter} ({lang}): Space ticked nothing"
        assert page.evaluate("Reveal.getIndices().h") == index, "Space left the slide"
    log.assert_clean(f"{chapter} ({lang}) explorer")
    context.close()
    assert ring, f"{chapter} ({lang}): the focused box shows no ring"


# ------------------------------------------------------------ tags (no browser)

def _svg(label: str) -> dict:
    return {"output_type": "display_data", "metadata": {},
            "data": {"image/svg+xml": f"<svg><text>{label}</text></svg>"}}


def _figure_of(html: str) -> str:
    url = html.split("<img src='", 1)[1].split("'", 1)[0]
    return base64.b64decode(url.split(",", 1)[1]).decode()


def test_a_tagged_cell_becomes_its_sections_slide():
    """The section's slide shows the tagged cell's figure (not the first one), and
    its points are the tagged markdown cell's."""
    section = {"title": "4.1 A section", "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": "## 4.1 A section\n\n"
         "The first sentence of the prose is long enough. More prose."},
        {"cell_type": "code", "metadata": {}, "source": "draw(a)",
         "outputs": [_svg("first")]},
        {"cell_type": "code", "metadata": {"tags": ["slides"]}, "source": "draw(b)",
         "outputs": [_svg("key")]}]}
    untagged = copy.deepcopy(section)
    del untagged["cells"][2]["metadata"]["tags"]
    assert "first" in _figure_of(slides.slide(untagged, "en"))
    assert "key" in _figure_of(slides.slide(section, "en"))
    section["cells"].append({"cell_type": "markdown", "metadata": {"tags": [
        "slides"]}, "source": "What a lecturer says"})
    made = slides.slide(section, "en")
    assert "<li>What a lecturer says</li>" in made and "first sentence" not in (
        made.split("<aside")[0])
    assert "first sentence" in made.split("<aside")[1], "the prose is the notes"


def test_every_tagged_cell_exists_with_a_figure():
    """Every id in slide_tags.KEY_CELLS is a code cell of its chapter that draws."""
    assert set(slide_tags.KEY_CELLS) == set(CHAPTERS)
    for chapter, ids in slide_tags.KEY_CELLS.items():
        nb = json.loads((BOOK / f"{chapter}.ipynb").read_text(encoding="utf-8"))
        cells = {c.get("id"): c for c in nb["cells"]}
        for cell_id in ids:
            assert cell_id in cells, f"{chapter}: no cell {cell_id} (slide_tags.py)"
            cell = cells[cell_id]
            assert cell["cell_type"] == "code" and slides._output_figure(cell), (
                f"{chapter}: cell {cell_id} draws nothing for its slide")


def test_slide_tags_are_applied_once(tmp_path):
    """slide_tags tags exactly the table's cells, rewrites nothing the second time,
    and the deck then shows the tagged cell's figure."""
    for chapter in slide_tags.KEY_CELLS:
        shutil.copy(BOOK / f"{chapter}.ipynb", tmp_path)
    slide_tags.apply(tmp_path)
    assert slide_tags.apply(tmp_path, check=True) == []
    assert slide_tags.apply(tmp_path) == []
    chapter, ids = "05_writing_a_pass", slide_tags.KEY_CELLS["05_writing_a_pass"]
    nb = json.loads((tmp_path / f"{chapter}.ipynb").read_text(encoding="utf-8"))
    tagged = [c["id"] for c in nb["cells"]
              if "slides" in c["metadata"].get("tags", [])]
    assert tagged == ids
    _, _, found = slides.sections(nb)
    last = next(s for s in found if any(c.get("id") == ids[-1] for c in s["cells"]))
    key = next(c for c in nb["cells"] if c["id"] == ids[-1])
    assert slides.figure(last) == slides._output_figure(key)
