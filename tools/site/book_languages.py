"""The book in two languages: which folder each goes to, and the switch between them.

`make site` runs Sphinx twice from the same sources: English into html/en/, Chinese
(`-D language=zh_CN`, the catalogs in book/locales) into html/zh/. Every page carries
a switch (English | 中文) that links the same page in the other folder; the reader's
section is added to that link by _static/language-switch.js when it is clicked.
Strings that come from conf.py rather than from a page (the site's title, the
footer, the alt text written for figures, dropdown titles) are translated here:
the catalogs hold only what the pages say.
"""

from __future__ import annotations

import sys
from pathlib import Path

from docutils import nodes
from sphinx.transforms import SphinxTransform

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TEMPLATES = HERE / "templates"

# (Sphinx language, site folder, the name readers look for), in switch order.
LANGUAGES = [("en", "en", "English"), ("zh_CN", "zh", "中文")]

# What conf.py writes itself, in Chinese. Keys are the English text.
ZH = {
    "graphopt: computation graphs, folding and fusion":
        "graphopt：计算图、常量折叠与算子融合",
    "Built offline with Sphinx, myst-nb and sphinx-book-theme; every chapter ran "
    "on the machine that built this site.":
        "本站用 Sphinx、myst-nb 和 sphinx-book-theme 离线构建；每一章都在构建本站的"
        "机器上实际运行过。",
    "Graph drawing: {title}": "计算图绘图：{title}",
    "Figure drawn by the code cell above": "上方代码单元绘制的图",
    "Graph drawing": "计算图绘图",
    ". ": "。",
    "{n} nodes: {nodes}.": "{n} 个节点：{nodes}。",
    "Edges: {edges}.": "边：{edges}。",
    " or ": "或",
    "Slides": "幻灯片",
    " per ": "每",
    "{n} nodes ({ops}) and {e} edges.": "{n} 个节点（{ops}），{e} 条边。",
    "Details": "详情",
    "Read this page in": "本页的其他语言版本",
}


def is_chinese(language: str | None) -> bool:
    """True for the Chinese build (`-D language=zh_CN`)."""
    return (language or "").lower().startswith("zh")


def text(language: str | None, english: str) -> str:
    """`english` in the build's language (only what conf.py writes itself)."""
    return ZH.get(english, english) if is_chinese(language) else english


def _folder(language: str) -> str:
    for code, folder, _ in LANGUAGES:
        if code == language or code.split("_")[0] == language.split("_")[0]:
            return folder
    raise ValueError(f"no site folder for language {language!r}: add it to LANGUAGES "
                     "in tools/site/book_languages.py")


def switch_links(language: str, pagename: str) -> list[dict]:
    """The switch's links from `pagename` (relative, so the site works from a disk)."""
    up = "../" * (pagename.count("/") + 1)
    here = _folder(language)
    return [{"label": label, "lang": code.replace("_", "-"), "current": folder == here,
             "href": f"{up}{folder}/{pagename}.html"}
            for code, folder, label in LANGUAGES]


def _localize_config(app, config) -> None:
    """Title, footer and search dictionary of the Chinese build."""
    if not is_chinese(config.language):
        return
    config.html_title = text(config.language, config.html_title)
    options = config.html_theme_options
    if "extra_footer" in options:
        options["extra_footer"] = text(config.language, options["extra_footer"])
    # Sphinx's Chinese search splits words with jieba; the glossary's names are words.
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from i18n.glossary import jieba_dictionary
    finally:
        sys.path.pop(0)
    glossary = Path(app.srcdir) / "glossary.md"
    if glossary.is_file():  # a test's small book may have none
        words = jieba_dictionary(glossary, Path(app.doctreedir) / "jieba-glossary.txt")
        config.html_search_options = {**config.html_search_options, "dict": str(words)}


class OutputsStayAsRun(SphinxTransform):
    """Code cells and their outputs are the same in both languages, by construction:
    nothing in them goes into a catalog or is replaced from one. (Without this the
    gettext builder, which has no mime-type preference of its own, extracts the
    LaTeX form of a displayed source listing as a "paragraph" to translate.)"""

    default_priority = 15  # before sphinx.transforms.i18n.Locale (20)

    def apply(self, **kwargs) -> None:
        for cell in self.document.findall(nodes.Element):
            if str(cell.get("nb_element", "")).startswith("cell_code"):
                for inner in cell.findall(nodes.TextElement):
                    inner["translatable"] = False


def _chinese_search():
    """Sphinx's Chinese search language, with its JavaScript stemmer named right.

    Sphinx 9.0 stems the Latin words of a Chinese page with the English stemmer but
    ends language_data.js with `window.Stemmer = ChineseStemmer`, a name nothing
    defines: the search page stops with "ChineseStemmer is not defined". The same
    code, ending with the English stemmer's real name, goes in instead.
    """
    import sphinx.search
    from sphinx.search.zh import SearchChinese

    js = Path(sphinx.search.__file__).parent / "minified-js"
    parts = [(js / name).read_text(encoding="utf-8")
             for name in ("base-stemmer.js", SearchChinese.js_stemmer_rawcode)]

    class ChineseSearch(SearchChinese):
        js_stemmer_rawcode = ""
        js_stemmer_code = "\n".join([*parts, "window.Stemmer = EnglishStemmer;"])

    return ChineseSearch


def _page_context(app, pagename, templatename, context, doctree) -> None:
    context["graphopt_languages"] = switch_links(app.config.language, pagename)
    context["graphopt_switch_label"] = text(app.config.language, "Read this page in")


def _keep_each_links_anchor() -> None:
    """A translated paragraph's links keep their own anchors.

    Sphinx's i18n step copies each English link's attributes onto the translated
    link with the same target page, matched by page only; MyST keeps the anchor
    (`glossary.md#kernel`) in `reftargetid`, so with two glossary links in one
    paragraph both got the last one's anchor. Not copying it leaves each translated
    link the anchor its Markdown names (the sync check keeps those the English's).
    """
    from sphinx.transforms import i18n
    if "reftargetid" not in i18n.EXCLUDED_PENDING_XREF_ATTRIBUTES:
        i18n.EXCLUDED_PENDING_XREF_ATTRIBUTES += ("reftargetid",)


def setup(app) -> None:
    """Connect the language switch and the Chinese build's own strings."""
    _keep_each_links_anchor()
    app.connect("config-inited", _localize_config)
    app.connect("html-page-context", _page_context)
    app.add_transform(OutputsStayAsRun)
    app.add_search_language(_chinese_search())
    app.add_js_file("language-switch.js")
    app.add_css_file("languages.css")
