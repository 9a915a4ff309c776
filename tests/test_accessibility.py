"""Accessibility of the book site and of the pass explorer, checked with axe-core.

axe-core (tools/site/node_modules, installed by `make site`'s `npm ci`) runs in a real
headless Chromium on every page of both editions, after the page's scripts have run:
no serious or critical violation is allowed, in light mode (every WCAG A/AA rule and
best practice axe has) and in dark mode (colour contrast, the rule the mode changes).
The static pass explorer is used with the keyboard alone: Tab reaches its boxes, the
focused box shows a ring, Space ticks it and the drawing changes, and its scrolling
graph boxes are reachable. `tools/site/axe_audit.py` prints the same audit as counts
by rule, for a person. GRAPHOPT_SITE=<folder> tests a site built elsewhere.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from browser import (  # noqa: F401 - chromium is a fixture
    BOOK,
    LANGUAGES,
    ROOT,
    built_site,
    chromium,
    serve,
)

sys.path.insert(0, str(ROOT / "tools" / "site"))
import axe_audit  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]
VIEWPORT = {"width": 1280, "height": 900}
CONTRAST = {"runOnly": {"type": "rule", "values": ["color-contrast"]},
            "resultTypes": ["violations"]}


def _lines(page_name: str, violations: list[dict]) -> list[str]:
    return [f"{page_name}: {v['impact']} {v['id']} ({v['help']}): "
            + "; ".join(" ".join(n["target"]) + " " + n["html"][:120]
                        for n in v["nodes"][:3])
            for v in violations]


@pytest.fixture(scope="module", params=LANGUAGES)
def edition(request):
    """(folder of one edition, its base URL), the whole site served on 127.0.0.1."""
    site = built_site(lang=request.param)
    with serve(site.parent) as url:
        yield site, f"{url}{site.name}/"


def _theme(page) -> str:
    return page.evaluate("document.documentElement.dataset.theme")


def _switch(page, name: str, mode: str) -> None:
    """The theme's own colour-mode menu item, clicked (what a reader's click runs):
    the page turns to `mode` in place, and the choice is saved for the next page."""
    page.evaluate("m => document.querySelector(`.theme-change-button"
                  "[data-mode=${m}]`).click()", mode)
    assert _theme(page) == mode, f"{name}: the theme did not switch to {mode}"
    # no colour caught half-way through a CSS transition
    page.wait_for_function("document.getAnimations().every("
                           "a => a.playState !== 'running')")


def _audit(page, mode: str) -> list[dict]:
    if mode == "light":  # every rule
        return axe_audit.audit(page)
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(axe_audit.axe_script()))
    # the rule dark mode changes
    return page.evaluate("o => axe.run(document, o)", CONTRAST)["violations"]


def _audit_every_page(chromium, site: Path, base: str) -> dict[str, list[str]]:
    """{mode: problems} of every page, each page loaded once and audited in both
    modes: it opens in the mode the previous page switched to (the theme must honour
    the reader's saved choice on load), is audited, switched with the theme's menu to
    the other mode and audited again (the slide decks: light only, no dark mode)."""
    context = chromium.new_context(viewport=VIEWPORT)
    context.route(lambda url: not url.startswith((base.split("/en/")[0].split(
        "/zh/")[0], "data:", "blob:")), lambda route: route.abort())
    page = context.new_page()
    problems: dict[str, list[str]] = {"light": [], "dark": []}
    names = axe_audit.pages(site)
    assert len(names) >= 10, f"only {len(names)} pages built in {site}"
    saved = "light"  # the theme keeps the reader's choice in localStorage
    context.add_init_script("if (!sessionStorage.getItem('audit')) {"
                            "sessionStorage.setItem('audit', '1');"
                            f"localStorage.setItem('mode', '{saved}');"
                            f"localStorage.setItem('theme', '{saved}');}}")
    try:
        for name in names:
            page.goto(base + name)
            axe_audit.settle(page)
            if name.startswith("slides/"):  # a deck has no light/dark switch
                problems["light"] += _lines(name, axe_audit.blocking(
                    _audit(page, "light")))
                continue
            other = "dark" if saved == "light" else "light"
            assert _theme(page) == saved, f"{name}: the page did not open in {saved}"
            for mode in (saved, other):
                if mode == other:
                    _switch(page, name, mode)
                found = axe_audit.blocking(_audit(page, mode))
                problems[mode] += _lines(name, found)
            saved = other
    finally:
        context.close()
    return problems


@pytest.fixture(scope="module")
def audits(edition, chromium):
    """Both modes' problems for one edition (one page load per page for both)."""
    site, base = edition
    return _audit_every_page(chromium, site, base)


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_no_serious_violation_on_any_page(mode, audits):
    """axe-core finds no serious or critical violation on any page of the edition:
    light mode, every rule; dark mode, colour contrast (the rule the mode changes)."""
    problems = audits[mode]
    assert not problems, (f"{len(problems)} serious or critical axe-core violation(s) "
                          f"in {mode} mode:\n  " + "\n  ".join(problems))


def test_graph_drawings_say_their_nodes_and_edges(edition):
    """Every Graphviz drawing's alt text counts its nodes (and lists them and their
    edges, for a small graph)."""
    import re

    site, _ = edition
    drawings = 0
    for name in axe_audit.pages(site):
        text = (site / name).read_text(encoding="utf-8")
        for img in re.findall(r"<img [^>]*src=\"_images/[^\"]+\.svg\"[^>]*>", text):
            src = re.search(r'src="([^"]+)"', img)[1]
            if "Generated by graphviz" not in (site / src).read_text("utf-8")[:400]:
                continue  # a plot: the chapter writes its alt text itself
            alt = re.search(r'alt="([^"]*)"', img)
            assert alt, f"{name}: a drawing without alt text: {img[:120]}"
            drawings += 1
            assert re.search(r"\d+ (nodes|个节点)", alt.group(1)), (
                f"{name}: the drawing's alt text does not say its nodes: "
                f"{alt.group(1)[:160]}")
    assert drawings >= 10, f"only {drawings} graph drawings on the site"


# ------------------------------------------------------------------ the explorer


def _explorer_page(folder: Path) -> tuple[str, list[str]]:
    """A page with one static explorer, the site's stylesheet and a11y.js."""
    from graphopt import models
    from graphopt.explorer.static import StaticExplorer

    model, inputs = models.example("basic_block")
    ex = StaticExplorer(model, *inputs, measure=False)  # graphs, not times, here
    for name in ("a11y.js", "graphopt.css"):
        (folder / name).write_text((BOOK / "_static" / name).read_text("utf-8"),
                                   encoding="utf-8")
    page = ex.page().replace("<html>", "<html lang='en'>").replace(
        "</head>", "<link rel='stylesheet' href='graphopt.css'>"
        "<script src='a11y.js'></script></head>").replace(
        "<body>", "<body><main><h1>explorer</h1>").replace("</body>", "</main></body>")
    (folder / "index.html").write_text(page, encoding="utf-8")
    return ex.html, list(ex.engine.passes)


def _focused(page) -> dict:
    return page.evaluate("""() => {
        const el = document.activeElement, s = getComputedStyle(el);
        return {tag: el.tagName, type: el.type || '', id: el.id,
                scroll: el.hasAttribute('data-a11y-scroll'),
                ring: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2};
    }""")


def _assert_outlined(page, uid: str) -> None:
    """Colour is not the only mark of a changed node: new nodes have a solid 3 px
    outline, rewritten ones a dashed one, and the legend's keys look the same."""
    marks = page.evaluate("""uid => [...document.querySelectorAll(
        `#${uid}-graph .gox-new > :is(polygon, path, ellipse), ` +
        `#${uid}-graph .gox-changed > :is(polygon, path, ellipse)`)].map(e => {
        const s = getComputedStyle(e);
        return {cls: e.parentNode.classList.contains('gox-new') ? 'new' : 'changed',
                width: parseFloat(s.strokeWidth), dash: s.strokeDasharray};
    })""", uid)
    assert marks, "the ticked pass outlined no node"
    for m in marks:
        assert m["width"] >= 3, f"a {m['cls']} node's outline is {m['width']} px"
        assert (m["dash"] == "none") == (m["cls"] == "new"), m
    keys = page.evaluate(f"""() => [...document.querySelectorAll(
        '#{uid}-diff [aria-hidden=true]')].map(e => getComputedStyle(e).borderStyle)""")
    assert keys == ["solid", "dashed"], f"the legend's keys: {keys}"


def test_explorer_works_with_the_keyboard_alone(chromium, tmp_path):
    """Tab reaches every pass box with a visible ring, Space ticks it and the drawing
    changes (its changed nodes outlined, not only coloured), the graph boxes that
    scroll are in the tab order, and axe is clean."""
    import re

    fragment, passes = _explorer_page(tmp_path)
    uid = re.search(r'class="graphopt-static-explorer" id="([^"]+)"', fragment)[1]
    page = chromium.new_page(viewport=VIEWPORT)
    with serve(tmp_path) as base:
        page.goto(base + "index.html")
        page.wait_for_selector(f"#{uid}[data-ready='1']")
        page.wait_for_timeout(200)
        seen, boxes, scrollers = set(), [], []
        for _ in range(len(passes) + 12):
            page.keyboard.press("Tab")
            now = _focused(page)
            if now["id"] in seen and now["id"]:
                break
            seen.add(now["id"])
            if now["type"] == "checkbox":
                boxes.append(now)
            if now["scroll"]:
                scrollers.append(now)
            if now["tag"] != "BODY":
                assert now["ring"], f"focus on {now} shows no ring"
        assert boxes, "Tab never reached a pass box"
        enabled = page.locator(f"#{uid} input[type=checkbox]:not([disabled])").count()
        assert len(boxes) == enabled, f"Tab reached {len(boxes)} of {enabled} boxes"
        page.focus(f"#{uid} input[type=checkbox]:not([disabled])")
        before = page.inner_html(f"#{uid}-graph")
        page.keyboard.press("Space")
        page.wait_for_function(f"document.getElementById('{uid}').dataset.combo !== '0'")
        assert page.inner_html(f"#{uid}-graph") != before, "Space changed no drawing"
        combo = page.get_attribute(f"#{uid}", "data-combo")
        page.focus(f"#{uid} input[data-pass=fold_conv_bn]")  # folds: new nodes
        page.keyboard.press("Space")
        page.wait_for_function(f"document.getElementById('{uid}').dataset.combo "
                               f"!== '{combo}'")
        _assert_outlined(page, uid)
        scrolling = page.evaluate(
            "() => [...document.querySelectorAll('.gox-scroll')].filter("
            "e => e.scrollHeight > e.clientHeight + 1 || e.scrollWidth > e.clientWidth + 1"
            ").length")
        reachable = page.locator(".gox-scroll[tabindex='0']").count()
        assert reachable >= scrolling, (
            f"{scrolling} graph boxes scroll, {reachable} are in the tab order")
        blocking = axe_audit.blocking(axe_audit.audit(page))
        assert not blocking, "\n".join(_lines("explorer", blocking))
