"""The chapters' slide decks (tools/site/slides.py, `make slides`) in a real Chromium.

Seven English and seven Chinese decks, built offline into a temporary folder and served
from 127.0.0.1: at 1280x720 every slide fits (nothing cut at any edge, nothing
scrolls), no text is under 18 px, every slide has speaker notes and every figure
alt text, nothing is requested from another host, no console error, and axe-core
finds no serious or critical violation.
"""

from __future__ import annotations

import sys

import pytest

from browser import BOOK, ROOT, chromium, serve, watch  # noqa: F401 - a fixture

sys.path.insert(0, str(ROOT / "tools" / "site"))
import axe_audit  # noqa: E402
import slides  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]
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
    if (own && parseFloat(getComputedStyle(el).fontSize) < %d)
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
