"""The labs' Chinese hand-outs (issue 25): translated text, one code, one autograder.

The catalogs (labs/locales/zh_CN/LC_MESSAGES/<lab>.po) must hold every block of the
lab master's markdown, each translated and reviewed, with its markup, code and numbers
intact and Chinese typography; the hand-out `make labs` writes from them must have
the English hand-out's code cells, tests and task headers, so one grader grades both.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from grading import answers, build, classrun, sandbox  # noqa: E402
from i18n import catalog, labs  # noqa: E402
from i18n.notebooks import msgids  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from lab_builds import built  # noqa: E402

LABS = sorted(build.LABS)
CJK = "\u3400-\u9fff"
_CODE = re.compile(r"`[^`]*`")
_LINK_TARGET = re.compile(r"\]\(([^)]*)\)")
_MATH = re.compile(r"\$[^$]+\$")


def _entries(lab: int):
    return [m for m in catalog.read(labs.catalog_path(build.LABS[lab])) if m.id]


@pytest.mark.parametrize("lab", LABS)
def test_catalog_holds_the_masters_blocks(lab):
    nb = json.loads(build.master(lab).read_text(encoding="utf-8"))
    expected = list(dict.fromkeys(msgids(nb)))
    assert [m.id for m in _entries(lab)] == expected, (
        "the master's markdown changed: run `python tools/zh_notebooks.py extract "
        f"{lab}` and translate the new or changed entries")


@pytest.mark.parametrize("lab", LABS)
def test_every_entry_is_translated_and_reviewed(lab):
    bad = [m.id[:60] for m in _entries(lab) if not m.string or m.fuzzy]
    assert not bad, f"empty or fuzzy entries in lab {lab}: {bad}"


def _markup(text: str) -> tuple[Counter, Counter, Counter]:
    """Code spans, link targets and math of a text, and its numbers outside them."""
    code = Counter(_CODE.findall(text))
    links = Counter(_LINK_TARGET.findall(text)) + Counter(_MATH.findall(text))
    plain = _MATH.sub(" ", _LINK_TARGET.sub(" ", _CODE.sub(" ", text)))
    return code, links, Counter(re.findall(r"\d+(?:\.\d+)?", plain))


@pytest.mark.parametrize("lab", LABS)
def test_translations_keep_code_links_math_and_numbers(lab):
    for m in _entries(lab):
        if not m.string:
            continue
        (code, links, numbers), (zh_code, zh_links, zh_numbers) = (
            _markup(m.id), _markup(m.string))
        assert zh_code == code, (m.id[:60], code - zh_code, zh_code - code)
        assert zh_links == links, m.id[:60]
        assert not numbers - zh_numbers, (m.id[:60], numbers - zh_numbers)
        assert m.id.count("**") == m.string.count("**"), m.id[:60]


def _typography_errors(text: str) -> list[str]:
    """Chinese typography: a space between Chinese and Latin letters, digits or code;
    full-width punctuation next to Chinese."""
    plain = _LINK_TARGET.sub("]", _CODE.sub("C", text))
    rules = {"no space before Latin": rf"[{CJK}][A-Za-z0-9]",
             "no space after Latin": rf"[A-Za-z0-9][{CJK}]",
             "ASCII punctuation after Chinese": rf"[{CJK}][,.;:!?()]",
             "ASCII punctuation before Chinese": rf"[,;:!?()][{CJK}]"}
    return [f"{rule}: {m.group(0)!r}" for rule, pattern in rules.items()
            for m in re.finditer(pattern, plain)]


@pytest.mark.parametrize("lab", LABS)
def test_translations_follow_chinese_typography(lab):
    errors = {m.id[:50]: e for m in _entries(lab) if m.string
              and (e := _typography_errors(m.string))}
    assert not errors, errors


def test_typography_check_catches_what_it_should():
    assert _typography_errors("运行cell，然后(再)保存") == [
        "no space before Latin: '行c'",
        "ASCII punctuation after Chinese: '后('", "ASCII punctuation after Chinese: '再)'",
        "ASCII punctuation before Chinese: '(再'", "ASCII punctuation before Chinese: ')保'"]
    assert _typography_errors("运行 `cell`，然后（再）保存 1 次。") == []


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """Every lab assigned as `make labs` does (built once per run, shared)."""
    return built(LABS, tmp_path_factory.mktemp("dist"))


def _cells(path: Path, kind: str):
    nb = json.loads(path.read_text(encoding="utf-8"))
    return nb, [c for c in nb["cells"] if c["cell_type"] == kind]


@pytest.mark.parametrize("lab", LABS)
def test_chinese_handout_has_the_same_code_and_tests(dist, lab):
    english = dist[lab].student
    chinese = labs.chinese_name(english)
    en, en_code = _cells(english, "code")
    zh, zh_code = _cells(chinese, "code")
    assert zh_code == en_code  # sources, outputs, tags, ids
    assert zh["metadata"] == en["metadata"]  # otter's public tests live here
    assert [c["cell_type"] for c in zh["cells"]] == [c["cell_type"] for c in en["cells"]]
    # the grader reads which task a cell answers from the "## Task N.M" headers
    headers = [answers._TASK_HEADER.findall("".join(c["source"]))
               for c in _cells(english, "markdown")[1]]
    assert [answers._TASK_HEADER.findall("".join(c["source"]))
            for c in _cells(chinese, "markdown")[1]] == headers
    names = answers.answer_names(english)
    assert answers.answer_names(chinese) == names
    read = [answers.read_submission(p, names) for p in (english, chinese)]
    assert [(c.label, c.source, c.task) for c in read[1].cells] == [
        (c.label, c.source, c.task) for c in read[0].cells]


@pytest.mark.parametrize("lab", LABS)
def test_chinese_handout_is_chinese(dist, lab):
    chinese = labs.chinese_name(dist[lab].student)
    for cell in _cells(chinese, "markdown")[1]:
        text = "".join(cell["source"])
        assert re.search(f"[{CJK}]", text), text[:80]
    assert "_Points:_" not in chinese.read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.skipif(sandbox.why_unavailable() is not None,
                    reason=f"{sandbox.why_unavailable()}")
def test_one_autograder_grades_the_chinese_hand_ins(tmp_path):
    """Lab 1 built as `make labs` builds it; a Chinese solution scores full marks and
    the untouched Chinese hand-out scores what the English one does, same cases."""
    dist = tmp_path / "dist"
    rel = built([1], dist)[1]
    folder = tmp_path / "hand-ins"
    folder.mkdir()
    labs.write_handout(rel.solution, build.LABS[1])  # the solution, in Chinese
    shutil.copy(labs.chinese_name(rel.solution), folder / "zh_solution.ipynb")
    shutil.copy(labs.chinese_name(rel.student), folder / "zh_student.ipynb")
    shutil.copy(rel.student, folder / "en_student.ipynb")
    results = {r.student.removesuffix(".ipynb"): r for r in classrun.grade(
        1, folder, out=tmp_path / "out", workers=2, dist=dist)}
    solution = results["zh_solution"]
    assert solution.status == "graded", solution.reason
    assert solution.possible > 0 and solution.total == solution.possible, solution.why
    zh, en = results["zh_student"], results["en_student"]
    assert (zh.status, zh.total, zh.cases) == (en.status, en.total, en.cases)
