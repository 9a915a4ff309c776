"""One Chinese word per concept, the one a Chinese reader searches for.

The Chinese edition once wrote `Pass` as 优化遍, eager as 即时执行 (a near-synonym of
即时编译, JIT, its opposite), lowering as 降低 in one chapter and 降级 ("downgrade")
in another, and the section labels three ways each. Each Variant below names the
one word the book uses instead; the glossary gives the terms' names and, in its
"Words you will meet elsewhere" table, the community's words beside the book's.
This test reads every Chinese text of the project (the book's catalogs,
the labs' catalogs, the library's message catalog, README.zh.md) and rejects each
variant below; the self-tests feed every variant to the checker and assert it is
caught, and its canonical form is not.

Code spans, link targets and quoted English (a program's own message) are not
prose and are not checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

ROOT = Path(__file__).resolve().parents[1]
CATALOG_GLOBS = ("book/locales/zh_CN/**/*.po", "labs/locales/zh_CN/**/*.po",
                 "src/graphopt/locale/zh_CN/**/*.po")
PAGES = ("README.zh.md",)
CJK = "\u3400-\u9fff"


@dataclass(frozen=True)
class Variant:
    """A rejected way of writing a concept, the canonical way, and an example."""

    concept: str
    pattern: str  # searched in the Chinese prose (code and quoted English removed)
    canonical: str
    bad: str  # a sentence the checker must reject ...
    good: str  # ... and the same sentence with the canonical word, which it accepts
    english: str = ""  # if set, only entries whose English matches this are checked

    def found(self, chinese: str, english: str = "") -> bool:
        if self.english and not re.search(self.english, english, re.I):
            return False
        return re.search(self.pattern, prose(chinese), re.I) is not None


VARIANTS = (
    Variant("pass", r"优化遍|遍\s*[（(]\s*pass", "Pass（图优化 Pass）",
            "每个优化遍返回一个新图。", "每个 Pass 返回一个新图。"),
    Variant("eager", r"即时执行|eager\s*执行", "eager 模式",
            "模块以即时执行（eager execution）方式运行。",
            "模块以 eager 模式运行。"),
    Variant("lowering", r"降级|降低\s*[（(]\s*lower", "下降（lowering）",
            "后端稍后再把它降级为更底层的算子。",
            "后端稍后再把它下降（lowering）为更底层的算子。"),
    Variant("lowering (the noun)", r"降低", "下降（lowering）",
            "降低把每个融合组变成一个核函数。", "下降把每个融合组变成一个核函数。",
            english=r"\blowering\b"),
    Variant("profitability", r"盈利|有利可图|划算", "收益",
            "合法但没有盈利性。", "合法但没有收益。"),
    Variant("Open the box", r"黑箱|打开方框", "打开黑盒",
            "打开黑箱：从零实现折叠", "打开黑盒：从零实现折叠"),
    Variant("Going further", r"深入一步|(^|[“「#]\s*)更进一步", "进阶内容",
            "更进一步：空闲线程如何等待", "进阶内容：空闲线程如何等待"),
    Variant("spread", r"离散程度|波动范围", "离散范围",
            "取中位数并给出离散程度。", "取中位数并给出离散范围。"),
    Variant("learning objectives label", r"学习目标\**\s*[：:]", "**学习目标。**",
            "**学习目标**：学完本章，你将能够", "**学习目标。** 学完本章，你将能够"),
    Variant("lane", r"向量通道|车道", "lane",
            "AVX2 有 8 个向量通道。", "AVX2 有 8 个 float32 lane。"),
    Variant("lane (not channel)", r"通道", "lane",
            "也就是 8 个 float32 通道（lane）。", "也就是 8 个 float32 lane。",
            english=r"\blanes?\b"),
    Variant("kernel library", r"核函数库", "算子库",
            "调用 oneDNN 这样的核函数库。", "调用 oneDNN 这样的算子库。"),
    Variant("wrapper", r"包装函数", "包装代码",
            "生成的包装函数依次调用核函数。", "生成的包装代码依次调用核函数。"),
    Variant("notebook", r"(?<![A-Za-z_])notebooks?(?![A-Za-z_])", "笔记本",
            "请把本 notebook 保存在 book 文件夹里。",
            "请把本笔记本保存在 book 文件夹里。"),
)

_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(r"``.*?``|`[^`]*`")
_LINK_TARGET = re.compile(r"\]\([^)]*\)|<https?://[^>]*>|https?://\S+")
# a quoted English message (what a program prints): “this is lab 2's notebook”
_QUOTED_ENGLISH = re.compile(rf"[“\"「][^“”\"「」{CJK}]*[”\"」]")
_PRODUCT = re.compile(r"Jupyter Notebook|\bnotebooks?_\w+|\w+\.ipynb", re.I)


def prose(text: str) -> str:
    """`text` without the parts that are not Chinese prose."""
    for pattern in (_FENCE, _CODE, _LINK_TARGET, _QUOTED_ENGLISH, _PRODUCT):
        text = pattern.sub(" ", text)
    return text


def problems(chinese: str, english: str = "") -> list[str]:
    """What is wrong with the terms of one Chinese text (empty when nothing)."""
    return [f"{v.concept}: {re.search(v.pattern, prose(chinese), re.I).group(0)!r}"
            f" -> {v.canonical}" for v in VARIANTS if v.found(chinese, english)]


def _texts(path: Path):
    """(English, Chinese) pairs of a catalog, or ("", text) for a Chinese page."""
    if path.suffix != ".po":
        yield "", path.read_text(encoding="utf-8")
        return
    with path.open("rb") as f:
        for message in read_po(f):
            strings = message.string if isinstance(message.string, tuple) else (
                message.string,)
            english = " ".join(message.id) if isinstance(message.id, tuple) else (
                message.id)
            for chinese in strings:
                if message.id and chinese:
                    yield english, chinese


def chinese_files() -> list[Path]:
    found = {p for g in CATALOG_GLOBS for p in ROOT.glob(g)}
    found |= {ROOT / p for p in PAGES}
    return sorted(found)


def report(path: Path) -> list[str]:
    lines = []
    for english, chinese in _texts(path):
        for problem in problems(chinese, english):
            lines.append(f"  {english[:60]!r}: {problem}")
    return lines


@pytest.mark.parametrize("path", chinese_files(),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_chinese_text_uses_the_canonical_terms(path):
    found = report(path)
    assert not found, (f"{path.relative_to(ROOT)}: {len(found)} variant(s) of a "
                       "canonical term (the canonical word follows each arrow):\n"
                       + "\n".join(found))


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.concept)
def test_checker_catches_the_variant_and_accepts_the_canonical(variant):
    english = "the lowering lanes" if variant.english else ""
    assert variant.found(variant.bad, english), variant.bad
    assert problems(variant.bad, english), variant.bad
    assert not problems(variant.good, english), problems(variant.good, english)


def test_every_variant_the_issue_lists_is_caught():
    """Each variant the review found in the Chinese edition, fed to the checker."""
    listed = ["优化遍", "即时执行", "降低（lower）", "降级", "盈利性", "有利可图", "划算",
              "打开黑箱", "打开方框", "深入一步", "“更进一步”", "离散程度", "波动范围",
              "学习目标：", "**学习目标**：", "8 个 float32 向量通道", "核函数库",
              "包装函数", "保存本 notebook"]
    missed = [word for word in listed if not problems(f"正文{word}正文")]
    assert not missed, f"the checker lets these through: {missed}"
    assert problems("8 个 float32 通道（lane）", "8 float32 lanes")


def test_code_links_and_quoted_english_are_not_prose():
    assert not problems("运行 `notebook_降级.py`（见 [这里](降级.md)）。")
    assert not problems("评分程序回答“this is lab 2's notebook, not lab 3's”。")
    assert not problems("打开 `labs/dist/lab1.ipynb`，在 Jupyter Notebook 中运行。")
    assert not problems("逐通道的 scale（NCHW 的 C 是通道）。", "per-channel scale")
    assert not problems("第 4 章会更进一步：卷积是线性的。")
    assert not problems("融合降低了峰值内存。", "fusion lowers peak memory")
