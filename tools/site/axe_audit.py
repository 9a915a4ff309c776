"""Accessibility audit of the built site with axe-core, in a real headless Chromium.

axe-core (npm, tools/site/node_modules/axe-core) is injected into each page with
Playwright and run with its WCAG 2.x A/AA rules and best practices; the result is a
list of violations, each with its rule, impact and the elements it found.
tests/test_accessibility.py asserts that no page has a serious or critical one.

Usage, after `make site` (or a quick `make site SITE_OPTS="-D nb_execution_mode=off"`):
    .venv/bin/python tools/site/axe_audit.py [book/_build/html] [--details]
prints the count of violations by impact and rule over every page of both editions,
and with --details the elements behind each serious or critical one.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
AXE = HERE / "node_modules" / "axe-core" / "axe.min.js"
# Folders of the built site that hold assets, not pages.
ASSET_DIRS = {"_static", "_sources", "_images", "_widgets", "_downloads", ".doctrees"}
BLOCKING = ("serious", "critical")  # what the tests do not allow
# Results axe could not decide alone ("incomplete") are left to a human; the
# violations are what it is sure of.
RUN_OPTIONS = {"resultTypes": ["violations"]}


def axe_script() -> Path:
    """axe.min.js from tools/site/node_modules; a clear error when npm was not run."""
    if not AXE.is_file():
        raise FileNotFoundError(
            f"{AXE} is missing: run `make site` (it runs `npm ci` in tools/site) or "
            "`npm ci` in tools/site"
        )
    return AXE


def pages(site: Path) -> list[str]:
    """Every HTML page of one edition of the built site, relative to its folder."""
    return sorted(
        str(p.relative_to(site))
        for p in site.rglob("*.html")
        if not ASSET_DIRS.intersection(p.relative_to(site).parts)
    )


def audit(page) -> list[dict]:
    """axe-core's violations on the page a Playwright `page` shows now.

    Each violation: {"id", "impact", "help", "nodes": [{"target", "html"}, ...]}.
    """
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(axe_script()))
    result = page.evaluate("options => axe.run(document, options)", RUN_OPTIONS)
    return [
        {
            "id": v["id"],
            "impact": v["impact"],
            "help": v["help"],
            "nodes": [{"target": n["target"], "html": n["html"][:200]}
                      for n in v["nodes"]],
        }
        for v in result["violations"]
    ]


def settle(page) -> None:
    """Wait until the page's widgets and math are drawn (they change the DOM)."""
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(300)


def count(violations: list[dict]) -> Counter:
    """Elements found per (impact, rule)."""
    return Counter({(v["impact"], v["id"]): len(v["nodes"]) for v in violations})


def blocking(violations: list[dict]) -> list[dict]:
    """The serious and critical violations."""
    return [v for v in violations if v["impact"] in BLOCKING]


def _report(root: Path, details: bool) -> int:
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(HERE.parents[1] / "tests"))
    from browser import CHROMIUM_ARGS, chromium_path, serve

    total: Counter = Counter()
    bad = 0
    with sync_playwright() as p, serve(root) as base:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.route(lambda url: "127.0.0.1" not in url and not url.startswith("data:"),
                   lambda route: route.abort())
        for lang in ("en", "zh"):
            for name in pages(root / lang):
                page.goto(f"{base}{lang}/{name}")
                settle(page)
                found = audit(page)
                total += count(found)
                for v in blocking(found):
                    bad += len(v["nodes"])
                    if details:
                        print(f"{lang}/{name}: {v['impact']} {v['id']}: {v['help']}")
                        for n in v["nodes"][:5]:
                            print(f"    {n['target']}  {n['html'][:120]}")
        browser.close()
    print(f"axe-core violations, elements per rule, {root} (both editions):")
    for (impact, rule), n in sorted(total.items()):
        print(f"  {impact:9} {rule:32} {n}")
    by_impact = Counter()
    for (impact, _), n in total.items():
        by_impact[impact] += n
    print("  by impact:", dict(sorted(by_impact.items())))
    return 1 if bad else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", nargs="?", default=str(HERE.parents[1] / "book" /
                                                       "_build" / "html"))
    parser.add_argument("--details", action="store_true")
    args = parser.parse_args(argv)
    return _report(Path(args.site), args.details)


if __name__ == "__main__":
    sys.exit(main())
