"""The book in Chinese for JupyterLab: every chapter and page, rendered from English.

Written to a generated folder (`OUT`, under book/_build/, which git ignores and
`make clean` removes), never committed: the Chinese notebooks are a function of the
English notebooks and the catalogs, rendered again by every `make lab LANG=zh`, so
they cannot fall behind either. They carry the English notebooks' outputs, so they
open executed, with what the library printed translated by its own catalog
(`outputs.py`): what `GRAPHOPT_LANG=zh` makes it print when a cell runs again.
The folder is outside Sphinx's sources (conf.py excludes _build).
The pages the chapters link to (glossary.md, setup.md, ...) are rendered too, so a
link such as `glossary.md#kernel` opens the Chinese glossary.
"""

from __future__ import annotations

from pathlib import Path

from . import catalog, outputs
from .notebooks import Report, translate_notebook, translate_text

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
LOCALES = BOOK / "locales" / catalog.LOCALE / "LC_MESSAGES"
OUT = BOOK / "_build" / "notebooks_zh"


def pages(book: Path = BOOK) -> list[Path]:
    """The book's pages that have a catalog: chapters (.ipynb) and pages (.md)."""
    found = sorted(book.glob("*.ipynb")) + sorted(book.glob("*.md"))
    return [p for p in found if (LOCALES / f"{p.stem}.po").is_file()]


def render(page: Path, out: Path = OUT) -> Report:
    """Write the Chinese `page` into `out`; the report says what stayed English."""
    page = Path(page)
    translations = catalog.reviewed(catalog.read(LOCALES / f"{page.stem}.po"))
    text = page.read_text(encoding="utf-8")
    if page.suffix == ".ipynb":
        text, report = translate_notebook(text, translations.get, page.name,
                                          outputs.translate_outputs)
    else:
        report = Report(page.name)
        text = translate_text(text, translations.get, report)
    out.mkdir(parents=True, exist_ok=True)
    target = out / page.name
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")  # unchanged: keep its trust and time
    return report


def render_all(selected: list[str] | None = None, out: Path = OUT) -> list[Report]:
    """Render every page (or those whose name starts with one of `selected`)."""
    chosen = [p for p in pages() if not selected
              or any(p.name.startswith(s) for s in selected)]
    if selected and not chosen:
        raise SystemExit(f"no page of book/ starts with {selected}; pages: "
                         + ", ".join(p.name for p in pages()))
    return [render(p, out) for p in chosen]
