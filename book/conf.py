"""Sphinx configuration of the graphopt book: myst-nb, sphinx-book-theme, offline.

`make site` builds it twice, English into book/_build/html/en and Chinese
(`-D language=zh_CN`, catalogs in book/locales) into book/_build/html/zh, executing
every chapter once (cached by jupyter-cache: the code cells are the same in both
languages), with warnings as errors (tools/site/book_languages.py has the switch).
Nothing on a page loads from the internet: the widget manager, RequireJS and MathJax
are copied from npm packages (tools/site) into the site by tools/site/bundle.js, and
the theme's remote buttons are off.
"""

import html
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path

import tomllib

HERE = Path(__file__).absolute().parent
SITE_TOOLS = Path(__file__).resolve().parents[1] / "tools" / "site"
ASSETS = HERE / "_build" / "assets"  # written by tools/site/bundle.js (make site)
# tools/site: the language switch and the dropdown directive (their nodes must be
# importable by name: Sphinx pickles every page's doctree).
sys.path.insert(0, str(SITE_TOOLS))
import book_dropdown  # noqa: E402
import book_languages as languages  # noqa: E402

sys.path.pop(0)

# Explorers executed at build time emit their static, kernel-free version (chapter 3-6).
os.environ["GRAPHOPT_STATIC"] = "1"
os.environ.setdefault("PYTHONHASHSEED", "0")
os.environ.setdefault("GRAPHOPT_QUIET", "1")  # no progress bars in the pages
# Keep compile caches out of the home folder and warm between builds.
_CACHE = HERE.parent / ".cache"
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(_CACHE / "inductor"))
os.environ.setdefault("NUMBA_CACHE_DIR", str(_CACHE / "numba"))

project = "graphopt"
author = "the graphopt authors"
copyright = "2026, the graphopt authors"  # noqa: A001 - Sphinx reads this name
html_title = "graphopt: computation graphs, folding and fusion"

extensions = ["myst_nb"]
root_doc = "index"
language = "en"  # `-D language=zh_CN` builds the Chinese book from the catalogs below
# Catalogs, one per page (sphinx-intl 2.4). Regenerate their templates with
# `sphinx -b gettext -D nb_execution_mode=off book /tmp/gettext`: no source locations
# and no uuids, so a catalog changes only when the English does.
locale_dirs = ["locales"]
gettext_location = False
gettext_uuid = False
templates_path = [str(languages.TEMPLATES)]
exclude_patterns = [
    "_build",
    "jupyter_execute",
    "**.ipynb_checkpoints",
    ".ipynb_checkpoints",
    "labs",
    "labs/**",
    "**/labs/**",
    "Thumbs.db",
    ".DS_Store",
]

# ---------------------------------------------------------------- MyST and notebooks
myst_enable_extensions = [
    "colon_fence", "deflist", "dollarmath", "amsmath", "attrs_inline",
]
# `glossary.md#constant-folding` links need anchors on the ### term headings.
myst_heading_anchors = 3

nb_execution_mode = "cache"
nb_execution_cache_path = str(HERE / "_build" / ".jupyter_cache")
nb_execution_timeout = 300
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_allow_errors = False  # cells tagged raises-exception may still raise
nb_merge_streams = True
nb_kernel_rgx_aliases = {".*": "python3"}
# Prefer the drawn SVG of a graph over its text repr, PNG plots over their text.
nb_mime_priority_overrides = [
    ("html", "image/svg+xml", 5),
    ("html", "image/png", 6),
]

# Widget JavaScript from the site itself. Sphinx puts relative paths under _static/,
# hence the '../'. The "CDN" the manager would fetch third-party widget modules from
# is a local folder too: a widget the bundle lacks fails loudly in the site tests
# instead of quietly loading from the internet.
# The manager's modules find their font files next to themselves, at the URL RequireJS
# gives each module name (by default /@jupyter-widgets/...): map every name it
# defines onto _widgets/ first (a global `require` object before require.js loads is
# its configuration).
_WIDGET_MODULES = {
    "@jupyter-widgets/base": "base",
    "@jupyter-widgets/base7": "base7",
    "@jupyter-widgets/controls": "controls",
    "@jupyter-widgets/controls7": "controls7",
    "@jupyter-widgets/html-manager": "html-manager",
    "@jupyter-widgets/html-manager/dist": ".",
}
_REQUIRE_CONFIG = (
    "(function () {"
    " var root = (document.documentElement.dataset.content_root || './') + '_widgets/';"
    " var paths = {};"
    f" var names = {json.dumps(_WIDGET_MODULES)};"
    " for (var k in names) { paths[k] = root + names[k]; }"
    " window.require = {paths: paths};"
    "})();"
)
nb_ipywidgets_js = {
    "": {"body": _REQUIRE_CONFIG},
    "../_widgets/require.js": {},
    "../_widgets/embed-amd.js": {"data-jupyter-widgets-cdn": "_widgets/cdn/"},
}

# ---------------------------------------------------------------- math, served locally
mathjax_path = "../_widgets/mathjax/tex-chtml-full.js"
# Its configuration also lets the widget manager (MathJax 2 API) typeset with MathJax 3.
mathjax_config_path = str(SITE_TOOLS / "mathjax-config.js")

# ---------------------------------------------------------------- HTML
html_theme = "sphinx_book_theme"
html_favicon = "_static/favicon.svg"
html_static_path = ["_static"]  # CSS, and scripts that setup() adds to every page
html_css_files = ["graphopt.css"]
# Keyboard access to scrolling boxes, and names the theme lacks (a config value, not
# add_js_file: a change here then rewrites every page, not only the changed ones).
html_js_files = ["a11y.js"]
html_extra_path = [str(ASSETS)]
html_copy_source = True  # the .ipynb behind each chapter, for the download button
html_show_sourcelink = False
html_last_updated_fmt = None


def _repository_url() -> str | None:
    """The repository's address: [project.urls] Repository in pyproject.toml, or the
    GRAPHOPT_REPOSITORY_URL environment variable (a fork builds its own link)."""
    if os.environ.get("GRAPHOPT_REPOSITORY_URL"):
        return os.environ["GRAPHOPT_REPOSITORY_URL"]
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    if not pyproject.is_file():
        return None
    meta = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    urls = meta.get("project", {}).get("urls", {})
    return urls.get("Repository") or urls.get("Source") or urls.get("Homepage")


REPOSITORY_URL = _repository_url()
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": True,  # .ipynb and .md sources, served from _sources/
    "use_fullscreen_button": True,
    "use_repository_button": bool(REPOSITORY_URL),  # a link, nothing loaded from it
    **({"repository_url": REPOSITORY_URL} if REPOSITORY_URL else {}),
    "use_issues_button": False,
    "use_edit_page_button": False,
    "use_source_button": False,
    "launch_buttons": {},  # no Binder / Colab / JupyterHub: nothing remote
    "navigation_with_keys": False,
    "navbar_persistent": [],  # the side bar has the search field; no second one on top
    # English | 中文 at the top of every page (tools/site/templates)
    "article_header_end": ["slides-link.html", "language-switch.html",
                           "article-header-buttons.html"],
    "extra_footer": (
        "Built offline with Sphinx, myst-nb and sphinx-book-theme; every chapter ran "
        "on the machine that built this site."
    ),
}
html_context = {"default_mode": "light"}


# One line per chapter for the landing page; a chapter not written yet is left out.
CHAPTER_BLURBS = {
    "01_graphs_and_operators": "graphs as DAGs, the autograd graph, operator classes, "
    "memory traffic counted byte by byte, data dependencies and parallel levels.",
    "02_static_and_dynamic": "every PyTorch way to capture a graph side by side (fx, "
    "export, TorchScript, torch.compile), control flow, graph breaks, what each costs.",
    "03_constant_folding": "folding by evaluation, what tracing folds already, "
    "inductor's freezing, and the claim about ResNet-50 checked.",
    "04_operator_fusion": "Conv-BN folding algebra, the classic fusion patterns, "
    "elementwise fusion and its legality, when fusion does not pay.",
    "05_writing_a_pass": "a pass written from scratch: match, rewrite, clean up, "
    "verify, add it to the pipeline.",
    "06_fused_kernels": "generated numba and Triton kernels against eager PyTorch, "
    "torch.compile and this machine's copy bandwidth, on a roofline.",
    "07_real_models": "ResNet-18, MobileNetV3-Small and a BERT encoder through every "
    "pass, stage by stage, against inductor and ONNX Runtime, and where the remaining "
    "time goes.",
}
# The lab that practises each chapter (labs/<name>/, handed out with `make labs`).
CHAPTER_LABS = {
    "01_graphs_and_operators": "lab1_graphs_and_operators",
    "02_static_and_dynamic": "lab2_static_and_dynamic",
    "03_constant_folding": "lab3_constant_folding",
    "04_operator_fusion": "lab4_operator_fusion",
    "05_writing_a_pass": "lab5_write_a_pass",
    "06_fused_kernels": "lab6_fused_kernels",
    "07_real_models": "lab7_real_models",
}


def _chapter_title(path):
    """The chapter's `# N. Title` heading, read from its first markdown cell."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            for line in "".join(cell.get("source", "")).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return path.stem.replace("_", " ")


def _chapter_list():
    """Markdown list of the chapters that exist, with a line on what each teaches."""
    lines = []
    for path in sorted(HERE.glob("0*.ipynb")):
        title = _chapter_title(path)
        blurb = CHAPTER_BLURBS.get(path.stem, "")
        line = f"- **[{title}]({path.name})**" + (f": {blurb}" if blurb else "")
        lab = CHAPTER_LABS.get(path.stem)
        if lab and (HERE.parent / "labs" / lab).is_dir():
            name = f"Lab {lab[3]}"
            if (HERE / "instructors.md").is_file():  # the labs' table is there
                name = f"[{name}](instructors.md#the-seven-labs)"
            line += f" {name} (`labs/{lab}/`) practises it."
        lines.append(line)
    return "\n".join(lines) or "*The chapters are being written.*"


def _fill_landing_page(app, docname, source):
    """List the chapters on the landing page; drop pages that do not exist yet.

    Pages appear while the book is written (the instructors' page comes with the labs);
    Sphinx cannot silence an empty toctree glob, and warnings are errors here.
    """
    if docname != "index":
        return
    source[0] = source[0].replace("<!-- chapters -->", _chapter_list())
    if not any(HERE.glob("instructor*.md")):
        source[0] = source[0].replace("\ninstructor*\n", "\n")


def _reread_all_when_pages_come_or_go(app, env, added, changed, removed):
    """Re-read every page when one is added or removed, so every side bar lists it.

    Sphinx rewrites only changed pages; their navigation would miss a new chapter.
    Re-reading a notebook is cheap: its outputs come from the execution cache.
    """
    if added or removed:
        return sorted(env.found_docs - set(added) - set(changed))
    return []


_SVG_TITLE = re.compile(r"<title>([^<]+)</title>")
# Graphviz writes each node and edge as a group whose <title> is its name ("a->b" for
# an edge) and whose <text> lines are the label drawn (name, then op or shape).
_SVG_GROUP = re.compile(
    r'<g id="[^"]*" class="(node|edge)[^"]*">\s*<title>([^<]*)</title>(.*?)</g>', re.S)
_SVG_TEXT = re.compile(r"<text\b[^>]*>([^<]*)</text>")
# A drawing with more nodes than this is summed up by op instead of listed.
_LIST_AT_MOST = 24


def _node_words(title: str, body: str) -> tuple[str, str]:
    """(name, what it computes) of one drawn node. A graph's node shows its name, then
    its op or shape; a diagram's node (a box named level0 that reads "registers")
    is named by what it shows."""
    lines = [html.unescape(t).strip() for t in _SVG_TEXT.findall(body)]
    lines = [t for t in lines if t and not re.fullmatch(r"L\d+", t)]  # level tags
    short = title.rsplit(".", 1)[-1]  # a fused group's member: group.op
    if not lines or title in lines or short in lines:
        rest = [t for t in lines if t not in (title, short)]
        return title, rest[0] if rest else ""
    return lines[0], " ".join(lines[1:])


def _graph_in_words(svg: str, lang: str) -> str:
    """A Graphviz drawing's nodes and edges in words: every node (name and what the
    drawing says it computes) and every edge of a small graph; a count by op of a
    large one. The legend's nodes (graphopt.viz names them legend_*) are left out."""
    nodes, names, edges = [], {}, []
    for kind, title, body in _SVG_GROUP.findall(svg):
        title = html.unescape(title)
        if "legend_" in title:
            continue
        if kind == "edge":
            edges.append(re.split(r"->|--", title))
            continue
        name, what = _node_words(title, body)
        names[title] = name
        nodes.append((name, what))
    if not nodes:
        return ""
    say = languages.text
    if len(nodes) > _LIST_AT_MOST:
        ops = Counter(what or name for name, what in nodes)
        common = ", ".join(f"{count} {op}" for op, count in ops.most_common(8))
        return say(lang, "{n} nodes ({ops}) and {e} edges.").format(
            n=len(nodes), ops=common, e=len(edges))
    listed = ", ".join(f"{n} ({what})" if what else n for n, what in nodes)
    text = say(lang, "{n} nodes: {nodes}.").format(n=len(nodes), nodes=listed)
    if edges:
        ends = [" → ".join(names.get(e.split(":")[0], e) for e in edge)
                for edge in edges]
        text += " " + say(lang, "Edges: {edges}.").format(edges=", ".join(ends))
    # "L1 / shared memory", "TB/s": a slash in alt text reads as a path, to screen
    # readers and to the site test that looks for file names in alt text
    return text.replace(" / ", say(lang, " or ")).replace("/", say(lang, " per "))


def _image_path(app, node, docname) -> Path | None:
    uri = node.get("uri", "")
    for candidate in (Path(app.srcdir) / uri,
                      Path(app.env.relfn2path(uri, docname)[1])):
        if candidate.is_file():
            return candidate
    return None


def _alt_text(app, doctree, docname):
    """Give every output figure alt text that says what it shows, not its file name.

    A graph drawn by graphopt.draw carries its title in the SVG's <title> (the
    graph's name), and its nodes and edges are said in words after it; other figures
    get a plain description of where they come from.
    """
    from docutils import nodes

    for node in doctree.findall(nodes.image):
        alt = node.get("alt", "")
        if alt and alt != node.get("uri") and not alt.endswith((".svg", ".png")):
            continue
        path = _image_path(app, node, docname)
        title, words = None, ""
        lang = app.config.language
        if path is not None and path.suffix == ".svg":
            text = path.read_text(encoding="utf-8", errors="replace")
            match = _SVG_TITLE.search(text)
            title = html.unescape(match.group(1)).strip() if match else None
            words = _graph_in_words(text, lang)
        if title and title != "%3":
            stop = languages.text(lang, ". ")
            node["alt"] = languages.text(lang, "Graph drawing: {title}").format(
                title=title) + (stop + words if words else "")
        elif words:
            node["alt"] = languages.text(lang, "Graph drawing") + ": " + words
        else:
            node["alt"] = languages.text(lang, "Figure drawn by the code cell above")


# myst-nb names the "Show code cell source" toggles "Toggle hidden content", a name
# that does not contain the words shown (WCAG 2.5.3): their visible text names them.
_TOGGLE_LABEL = ' aria-label="Toggle hidden content"'


def _accessible_body(app, pagename, templatename, context, doctree):
    if "body" in context:
        context["body"] = context["body"].replace(
            "<summary" + _TOGGLE_LABEL + ">", "<summary>")


# ---------------------------------------------------------------- slides
# `make slides` (tools/site/slides.py) writes a reveal.js deck per chapter into
# _build/slides/<en|zh>/slides/; when they are there, the site serves them beside the
# chapters and each chapter links its deck (no deck, no link: nothing dangles).
SLIDES = HERE / "_build" / "slides"


def _slides_folder(language: str | None) -> Path:
    return SLIDES / ("zh" if languages.is_chinese(language) else "en")


def _serve_slides(app, config):
    folder = _slides_folder(config.language)
    if (folder / "slides").is_dir():
        config.html_extra_path = [*config.html_extra_path, str(folder)]


def _slides_link(app, pagename, templatename, context, doctree):
    deck = f"slides/{pagename}.html"
    found = (_slides_folder(app.config.language) / deck).is_file()
    context["graphopt_slides"] = deck if found else None
    context["graphopt_slides_label"] = languages.text(app.config.language, "Slides")
    context["graphopt_slides_lang"] = "zh-CN" if languages.is_chinese(
        app.config.language) else "en"


def setup(app):
    if "sphinx_design" not in extensions:
        book_dropdown.setup(app)
    languages.setup(app)
    app.connect("builder-inited", _check_assets)
    app.connect("source-read", _fill_landing_page)
    app.connect("doctree-resolved", _alt_text)
    app.connect("html-page-context", _accessible_body)
    app.connect("html-page-context", _slides_link)
    app.connect("config-inited", _serve_slides)
    app.connect("env-get-outdated", _reread_all_when_pages_come_or_go)
    return {"parallel_read_safe": True}


def _check_assets(app):
    """The HTML pages need the bundled widget JavaScript; other builders do not
    (the translation sync test runs the gettext builder on a fresh clone)."""
    bundled = (ASSETS / "_widgets" / "require.js").exists()
    if app.builder.format == "html" and not bundled:
        raise RuntimeError(
            f"{ASSETS}/_widgets is missing: build the site with `make site`, which "
            "runs `npm ci` and `node tools/site/bundle.js` first"
        )
