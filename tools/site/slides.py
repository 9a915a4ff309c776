"""One reveal.js deck per chapter, English and Chinese, from the executed chapters.

    python tools/site/slides.py [--out book/_build/slides] [CHAPTER ...]

A deck is cut from the chapter itself, so it cannot drift from it: the title slide
holds the chapter's title and learning objectives, and each `## ` section becomes a
slide with its heading, its points and its key figure, with the section's prose as
the speaker notes (press S in the deck):

- the points: the markdown cells of the section tagged `slides` (a lecturer's cut of
  the prose), or else the first sentence of the section's first paragraphs;
- the key figure: the output of the section's code cell tagged `slides`, or else its
  first drawn figure (SVG or PNG output), with the alt text the site gives it
  (tools/site/slide_tags.py writes the tags from its table of cell ids);
- a section that shows the pass explorer gets a slide more: the static explorer,
  built from the chapter's own code, which works on the slide without a kernel
  (tools/site/slide_explorer.py).

The Chinese decks read the Chinese chapters that tools/zh_notebooks.py renders from
the catalogs (same code and outputs, translated prose). reveal.js comes from npm
(tools/site/node_modules, `npm ci`): nothing loads from the internet. The decks land
in <out>/<lang>/slides/ with reveal.js beside them; `make site` serves them at
<lang>/slides/<chapter>.html, and each chapter page links its deck.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import slide_explorer
from markdown_it import MarkdownIt

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BOOK = ROOT / "book"
REVEAL = HERE / "node_modules" / "reveal.js"
OUT = BOOK / "_build" / "slides"
ZH_SOURCE = OUT / "notebooks_zh"
POINTS = 3  # at most this many points a slide: a lecturer says the rest
POINT_CHARS = {"en": 150, "zh": 70}  # a CJK character is about two Latin ones wide
MD = MarkdownIt("commonmark").enable("table")
_LINK = re.compile(r"\[((?:[^\[\]]|\[[^\]]*\])*)\]\([^)\s]+\)")
# A sentence ends at . ! ? (or their CJK forms) after a few characters ("1." and
# "e.g." do not end one) and before a space or the end.
_SENTENCE = re.compile(r"(.{12,}?[.!?。！？])(\s|$)", re.S)
_ITEM = re.compile(r"^\s*(?:\d+\.|[-*])\s+", re.M)
TEXT = {
    "en": {"objectives": "After this chapter you can", "notes": "Speaker notes",
           "deck": "slides", "lang": "en"},
    "zh": {"objectives": "学完本章，你能够", "notes": "讲稿", "deck": "幻灯片",
           "lang": "zh-CN"},
}


def _text(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _tags(cell) -> set:
    return set(cell.get("metadata", {}).get("tags", []))


def _unlink(markdown: str) -> str:
    """Links become their text: a deck is read on a projector, not clicked."""
    return _LINK.sub(lambda m: m.group(1), markdown)


def sections(nb: dict) -> tuple[str, list[dict], list[dict]]:
    """(chapter title, the cells before the first section, each `## ` section as
    {"title", "cells"})."""
    title, intro, found = "", [], []
    for cell in nb["cells"]:
        text = _text(cell)
        if cell["cell_type"] == "markdown":
            head = re.match(r"#\s+(.+)", text)
            if head and not title:
                title = head.group(1).strip()
            sub = re.match(r"##\s+(.+)", text)
            if sub:
                found.append({"title": sub.group(1).strip(), "cells": [cell]})
                continue
        (found[-1]["cells"] if found else intro).append(cell)
    return title, intro, found


def _first_sentence(paragraph: str, lang: str) -> str:
    paragraph = " ".join(paragraph.split())
    match = _SENTENCE.match(paragraph)
    sentence = match.group(1) if match else paragraph
    most = POINT_CHARS[lang]
    if len(sentence) > most:
        cut = sentence[:most]
        cut = cut.rsplit(" ", 1)[0] if " " in cut[most // 2:] else cut
        sentence = cut + " …"
    return sentence


def points(section: dict, lang: str) -> list[str]:
    """Markdown of the slide's points: the tagged cells, else first sentences."""
    tagged = [_text(c) for c in section["cells"]
              if c["cell_type"] == "markdown" and "slides" in _tags(c)]
    if tagged:
        return [_unlink(t) for t in tagged]
    found = []
    for cell in section["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for block in re.split(r"\n\s*\n", re.sub(r"^##.*\n?", "", _text(cell))):
            block = block.strip()
            # a list gives its items, a paragraph its first sentence; headings,
            # tables, code and math give nothing
            items = _ITEM.split(block)[1:] if _ITEM.match(block) else [block]
            for item in items:
                item = item.strip()
                if item and (item[0].isalnum() or item[0] in "*`“\"") and \
                        not item.startswith("|"):
                    found.append(_unlink(_first_sentence(item, lang)))
                if len(found) == POINTS:
                    return found
    return found


def _output_figure(cell) -> str | None:
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if "image/svg+xml" in data:
            svg = data["image/svg+xml"]
            svg = "".join(svg) if isinstance(svg, list) else svg
            b64 = base64.b64encode(svg.encode("utf-8")).decode("ascii")
            return f"data:image/svg+xml;base64,{b64}"
        if "image/png" in data:
            png = data["image/png"]
            png = "".join(png) if isinstance(png, list) else png
            return "data:image/png;base64," + png.replace("\n", "")
    return None


def figure(section: dict) -> str | None:
    """The key figure's data URL: the tagged code cell's, else the first drawn one."""
    code = [c for c in section["cells"] if c["cell_type"] == "code"]
    tagged = [c for c in code if "slides" in _tags(c)]
    for cell in tagged + code:
        url = _output_figure(cell)
        if url:
            return url
    return None


def _alt(url: str, title: str, lang: str) -> str:
    """What the figure shows: a drawing's title and its nodes, as on the site."""
    sys.path.insert(0, str(BOOK))
    try:
        import conf  # noqa: PLC0415 - the site's alt text, one implementation
    finally:
        sys.path.pop(0)
    if url.startswith("data:image/svg+xml"):
        svg = base64.b64decode(url.split(",", 1)[1]).decode("utf-8")
        match = conf._SVG_TITLE.search(svg)
        name = html.unescape(match.group(1)) if match else title
        words = conf._graph_in_words(svg, "zh_CN" if lang == "zh" else "en")
        return f"{name}. {words}".strip()
    return title


def _notes(section: dict) -> str:
    """The section's prose, as the speaker notes."""
    prose = [_unlink(re.sub(r"^##.*\n?", "", _text(c))) for c in section["cells"]
             if c["cell_type"] == "markdown" and "hide" not in " ".join(_tags(c))]
    return MD.render("\n\n".join(p for p in prose if p.strip()))


def slide(section: dict, lang: str) -> str:
    items = "".join(f"<li>{MD.renderInline(p)}</li>" for p in points(section, lang))
    body = f"<h2>{MD.renderInline(_unlink(section['title']))}</h2>"
    url = figure(section)
    if items:
        body += f"<ul class='points'>{items}</ul>"
    if url:
        alt = html.escape(_alt(url, section["title"], lang), quote=True)
        body += f"<figure><img src='{url}' alt=\"{alt}\"></figure>"
    notes = _notes(section)
    return (f"<section><div class='frame'>{body}</div>"
            f"<aside class='notes'>{notes}</aside></section>")


def title_slide(title: str, intro: list[dict], lang: str) -> str:
    """The chapter's title and its learning objectives (the numbered list)."""
    text = "\n\n".join(_text(c) for c in intro if c["cell_type"] == "markdown")
    items = re.findall(r"^\s*\d+\.\s+(.+(?:\n\s{2,}\S.*)*)", text, re.M)
    goals = "".join(f"<li>{MD.renderInline(_unlink(' '.join(i.split())))}</li>"
                    for i in items)
    head = f"<h1>{MD.renderInline(title)}</h1>"
    if goals:
        head += (f"<p class='lead'>{TEXT[lang]['objectives']}</p>"
                 f"<ol class='objectives'>{goals}</ol>")
    notes = MD.render(_unlink(text))
    return f"<section>{head}<aside class='notes'>{notes}</aside></section>"


PAGE = """<!DOCTYPE html>
<html lang="{lang}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} ({deck})</title>
<link rel="stylesheet" href="reveal/reveal.css">
<link rel="stylesheet" href="reveal/theme/white.css">
<link rel="stylesheet" href="deck.css">
</head>
<body>
<main><div class="reveal"><div class="slides">
{slides}
</div></div></main>
<script src="reveal/reveal.js"></script>
<script src="reveal/plugin/notes/notes.js"></script>
<script>
Reveal.initialize({{width: 1280, height: 720, margin: 0, hash: true,
  center: false, transition: "none", plugins: [RevealNotes]}});
</script>
</body>
</html>
"""
# The decks' styles (tools/site/deck.css), then the explorer slide's.
CSS = (HERE / "deck.css").read_text(encoding="utf-8")


def explorer_slides(nb: dict, section: dict) -> list[str]:
    """A slide per explorer the section shows, headed by its sub-section's heading,
    with that sub-section's prose as the notes."""
    found, heading, prose = [], section["title"], []
    for cell in section["cells"]:
        text = _text(cell)
        if cell["cell_type"] == "markdown":
            sub = re.match(r"#{2,4}\s+(.+)", text)
            if sub:
                heading, prose = sub.group(1).strip(), []
            prose.append(_unlink(re.sub(r"^#.*\n?", "", text)))
            continue
        index = next(i for i, c in enumerate(nb["cells"]) if c is cell)
        shown = slide_explorer.fragment(nb["cells"], index)
        if shown:
            notes = MD.render("\n\n".join(p for p in prose if p.strip()))
            found.append(f"<section class='explorer'><div class='frame'><h2>"
                         f"{MD.renderInline(_unlink(heading))}</h2>{shown}</div>"
                         f"<aside class='notes'>{notes}</aside></section>")
    return found


def deck(nb_path: Path, lang: str) -> str:
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    title, intro, found = sections(nb)
    slides = [title_slide(title, intro, lang)]
    for section in found:
        slides += [slide(section, lang), *explorer_slides(nb, section)]
    return PAGE.format(lang=TEXT[lang]["lang"], title=html.escape(title),
                       deck=TEXT[lang]["deck"], slides="\n".join(slides))


def _reveal(folder: Path) -> None:
    """reveal.js's script, styles, theme fonts and notes plugin, from npm."""
    if not (REVEAL / "dist" / "reveal.js").is_file():
        raise SystemExit(f"{REVEAL} is missing: run `npm ci` in tools/site "
                         "(`make slides` does)")
    target = folder / "reveal"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(REVEAL / "dist", target, ignore=shutil.ignore_patterns(
        "*.map", "*.esm.js", "reset.css"))
    # notes.js holds the speaker view itself (speaker-view.html and plugin.js are its
    # sources); its layout menu gets the name it lacks (axe: select-name)
    script = (REVEAL / "plugin" / "notes" / "notes.js").read_text(encoding="utf-8")
    menu = 'class=\\"speaker-layout-dropdown\\"'
    named = script.replace(menu, menu + ' aria-label=\\"Layout\\"')
    (target / "plugin" / "notes").mkdir(parents=True)
    (target / "plugin" / "notes" / "notes.js").write_text(named, encoding="utf-8")


def _chinese_chapters(chapters: list[str]) -> Path:
    """The Chinese chapters, rendered from the catalogs (tools/zh_notebooks.py)."""
    cmd = [sys.executable, str(ROOT / "tools" / "zh_notebooks.py"), "book",
           *[c[:2] for c in chapters], "--out", str(ZH_SOURCE)]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return ZH_SOURCE


def build(out: Path = OUT, chapters: list[str] | None = None) -> list[Path]:
    """Write every deck; returns their paths."""
    names = sorted(p.stem for p in BOOK.glob("0*.ipynb"))
    names = [n for n in names if not chapters or n[:2] in chapters or n in chapters]
    written = []
    for lang, source in (("en", BOOK), ("zh", _chinese_chapters(names))):
        folder = out / lang / "slides"
        folder.mkdir(parents=True, exist_ok=True)
        _reveal(folder)
        (folder / "deck.css").write_text(CSS + slide_explorer.CSS, encoding="utf-8")
        for name in names:
            path = folder / f"{name}.html"
            path.write_text(deck(source / f"{name}.ipynb", lang), encoding="utf-8")
            written.append(path)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="e.g. 03 (default: all)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    written = build(args.out, args.chapters)
    print(f"slides: {len(written)} decks in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
