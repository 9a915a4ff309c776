"""A Chinese hand-in's feedback is Chinese down to the lab tests' own words.

The grader's words come from its catalog (tools/grading/language.py); what each test
case checks and what its assertion says to fix come from the labs' catalog
(labs/locales/zh_CN/LC_MESSAGES/lab_tests.po, tools/grading/lab_messages.py),
translated in the grader's process after the run. Two labs are graded in the
sandbox, each as a class of one Chinese and one English hand-in with the same wrong
answer: the Chinese page names the fix in Chinese, the English page is what the
grader wrote before the catalog existed, and both get the same marks.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from grading import (  # noqa: E402
    answers,
    build,
    classrun,
    feedback,
    lab_messages,
    sandbox,
)
from grading.grade import Result, case_label  # noqa: E402
from grading.language import gettext  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from lab_builds import built  # noqa: E402

CJK = re.compile(r"[\u4e00-\u9fff]")
OFF_BY_ONE = ("off by one: every level is one too high. Levels count from 0, as "
              "chapter 1 and graphopt.levels count them: an operator that reads "
              "only graph inputs and parameters is on level 0")
# lab: (the answer's def line, a wrong body, the Chinese words that name the fix,
#       the English the same case says)
WRONG = {
    1: ("def levels(gm):",
        "    level = {}\n"
        "    for node in gm.graph.nodes:\n"
        "        if not node.op.startswith('call_') or "
        "str(node.target).startswith('_guards'):\n"
        "            continue\n"
        "        read = [level[i] for i in node.all_input_nodes if i in level]\n"
        "        level[node] = 1 + max(read) if read else 1   # counts from 1\n"
        "    return {n.name: lv for n, lv in level.items()}\n",
        "差一错误（off by one）：每个层级都多了 1。层级从 0 开始计数", OFF_BY_ONE),
    4: ("def bytes_saved(", "    return 4 * M * N * 4   # itemsize ignored\n",
        "bytes_saved 必须使用传入的 itemsize（这里是 8 字节），而不是 4",
        "bytes_saved must use the itemsize it is given (8 bytes here), not 4"),
}


# ------------------------------------------------------------------ extraction


def _master_cells(lab: int):
    return [c for c in nbformat.read(build.master(lab), as_version=4).cells
            if c.cell_type == "code" and "# BEGIN TEST CONFIG" in c.source]


def test_extraction_reads_descriptions_and_messages_not_values():
    """Each case's failure_message and each assert's words are msgids; an f-string's
    values are numbered fields; a message that is a value (`assert a == b, a`) is
    data and gives none."""
    msgids = [m for cell in _master_cells(1) for _l, m, _f in
              lab_messages.messages(cell.source)]
    assert OFF_BY_ONE in msgids
    assert "levels must return a dict from node name (str) to level (int), not {0}" \
        in msgids
    with open(build.master(1), "rb") as f:
        extracted = list(lab_messages.extract(f, (), (), {}))
    ids = [m for _n, _f, m, _c in extracted]
    assert "the seed's block is a chain: one operator per level, from level 0" in ids
    comments = next(c for _n, _f, m, c in extracted if m.startswith("levels must"))
    assert "{0} = type(_levels).__name__" in comments, comments
    assert lab_messages.messages("assert x == y, x\nassert y, f'{y}'\n") == []


def test_the_catalog_check_fails_on_a_changed_message(tmp_path):
    """A master whose assertion changed: the new words are missing, the old ones
    stale; a fuzzy entry and a .mo not compiled from the .po are named too."""
    from babel.messages.pofile import read_po, write_po

    labs = tmp_path / "labs"
    name = build.LABS[1]
    (labs / name).mkdir(parents=True)
    text = build.master(1).read_text(encoding="utf-8")
    assert "off by one: every level is one too high." in text
    (labs / name / "lab1.ipynb").write_text(
        text.replace("off by one: every level is one too high.",
                     "off by one: each level is one too high."), encoding="utf-8")
    locale = tmp_path / "locales"
    shutil.copytree(lab_messages.LABS_LOCALE, locale)
    po_path = locale / "zh_CN" / "LC_MESSAGES" / "lab_tests.po"
    with po_path.open("rb") as f:
        po = read_po(f)
    po["a chain of one input compiles too"].flags.add("fuzzy")  # lab 6's
    with po_path.open("wb") as f:
        write_po(f, po)
    found = lab_messages.problems(labs, locale)
    new = OFF_BY_ONE.replace("every level", "each level")
    assert f"missing: {new!r} (make lab-tests-catalog, then translate it)" in found
    assert f"stale: {OFF_BY_ONE!r} is no longer in a lab's tests" in found
    assert ("not translated or not reviewed: 'a chain of one input compiles too'"
            in found)
    assert any(p.startswith("lab_tests.mo is not lab_tests.po compiled")
               for p in found), found


# ------------------------------------------------------------------ translation


def test_a_public_and_a_hidden_failure_read_in_chinese():
    """The public case reports the values, the hidden one '...' in their place
    (runner.hidden_reason): both match the same msgid, the values are kept."""
    cell = next(c for c in _master_cells(1) if "levels(" in c.source)
    examples = [(cell.source, "")]
    public = ("AssertionError: levels must return a dict from node name (str) to "
              "level (int), not NoneType")
    hidden = public.replace("NoneType", "...")
    want = "levels 必须返回一个从节点名（str）到层级（int）的字典，而不是 "
    assert lab_messages.translate(public, examples, "zh") == \
        f"AssertionError: {want}NoneType"
    assert lab_messages.translate(hidden, examples, "zh") == \
        f"AssertionError: {want}..."
    assert lab_messages.translate(public, examples, "en") == public
    cut = f"AssertionError: {OFF_BY_ONE}"[:len("AssertionError: ") + 200]
    assert lab_messages.translate(cut, examples, "zh").startswith(
        "AssertionError: 差一错误（off by one）：每个层级都多了 1。")


def test_a_value_is_copied_as_text_never_formatted_or_matched_again():
    """A hand-in controls a public case's values: a value that holds a field, a
    format spec or a template's words ends up verbatim in the page."""
    msgid = "{0}, {1}, {2} may fuse, got {3}"
    tricky = "{0.__class__} {3} may fuse, got"
    values = lab_messages.match(msgid, f"a, b, c may fuse, got {tricky}")
    assert values == {0: "a", 1: "b", 2: "c", 3: tricky}
    assert lab_messages.fill("{0}、{1}、{2} 可以融合，得到的是 {3}", values) == \
        f"a、b、c 可以融合，得到的是 {tricky}"
    assert lab_messages.fill("{0} {9}", values) is None   # a field it lacks
    start = time.perf_counter()
    for _ in range(200):  # no backtracking on a long, almost matching value
        lab_messages.match("a{0}b{1}c{2}d{3}e", "a" + "b" * 199)
    assert time.perf_counter() - start < 1.0


def test_feedback_pages_translate_descriptions_and_reasons_only_in_chinese():
    """feedback.markdown on a case of lab 1's own table: the description and the
    assertion's words in Chinese, the marks and the English page unchanged."""
    cell = next(c for c in _master_cells(1) if "from level 0" in c.source)
    case = answers.Case("task_1_4", 1, False, 1.0,
                        lab_messages.description(cell.source), [(cell.source, "")])
    label = case_label(case)
    r = Result("ada.ipynb", total=0.0, possible=1.0, cases={label: 0.0},
               why={label: f"AssertionError: {OFF_BY_ONE}"}, tasks={"Task 1.4": 0})
    english = feedback.markdown(1, [case], r)
    assert f"{case.message}\n  - what went wrong: AssertionError: {OFF_BY_ONE}" \
        in english
    r.lang = "zh"
    page = feedback.markdown(1, [case], r)
    assert "讲义中的块是一条链：每层一个算子，从第 0 层开始" in page, page
    assert "AssertionError: 差一错误（off by one）：每个层级都多了 1。" in page, page
    assert "every level is one too high" not in page and "0 / 1" in page


def test_the_graders_own_reasons_read_in_chinese(tmp_path):
    """The reasons answers.py and grade.py write about a hand-in (a syntax error,
    a helper used before its definition, an answer defined twice, a statement not
    run, a function a task forbids), made by their own code: each is Chinese."""
    from grading import language
    from grading.grade import forbidden_in_task

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("print(helper(2))"),
        nbformat.v4.new_code_cell("def levels(gm):\n    return {}"),
        nbformat.v4.new_code_cell("def helper(x):\n    return x"),
        nbformat.v4.new_code_cell("def levels(gm):\n    return helper({})"),
        nbformat.v4.new_code_cell("%timeit helper(1)"),
        nbformat.v4.new_code_cell("def broken(:\n    pass"),
    ])
    path = tmp_path / "ada.ipynb"
    nbformat.write(nb, path)
    sub = answers.read_submission(path, {"task_1_4": {"levels"}})
    dropped = [f"not run: {c.label[1:-1]} {d}" for c in sub.cells for d in c.dropped]
    said = sub.problems + sub.notes + dropped + [
        forbidden_in_task("task_1_4", "graphopt.levels"),
        "not run: the 300 s for the submission were spent",
        "timeout in the tests: still running after the 300 s for the submission "
        "(killed)"]
    assert len(said) == 7, said
    for text in said:
        zh = language.reason(text, "zh")
        assert zh != text and CJK.search(zh), text
        assert not re.search(r"\b(is used in|line|defined|forbids|spent|still)\b",
                             zh), zh
    assert language.reason(said[-1], "zh") == \
        "the tests 超时：过了 分配给这份作业的 300 秒 仍在运行（已终止）"
    assert "单元格 6 第 1 行有语法错误" in language.reason(sub.problems[0], "zh")
    printed = "printed '3\\n', expected '4\\n'"   # runner.run_case, a public case
    assert language.reason(printed, "zh") == "打印了 '3\\n'，而测试期望的是 '4\\n'"


def test_no_lab_message_reads_as_one_of_the_graders_reasons():
    """feedback.why asks the grader's templates first: a lab's assertion that
    matched one (say '... raised by your code') would be worded as the grader's."""
    from grading import language

    for msgid in lab_messages.extracted():
        text = "AssertionError: " + re.sub(r"\{\d+\}", "...", msgid).replace(
            "{{", "{").replace("}}", "}")
        assert language.reason(text, "zh") == text, msgid


# ------------------------------------------------------------------ graded


def _wrong(nb, lab: int):
    """`nb` with the answer of WRONG[lab] replaced by its wrong body."""
    head, body = WRONG[lab][:2]
    cell = next(c for c in nb.cells if c.cell_type == "code"
                and c.source.startswith(head))
    fn = ast.parse(cell.source).body[0]
    lines = cell.source.split("\n")
    keep = lines[:fn.body[0].end_lineno]   # the def line and its docstring
    cell.source = "\n".join(keep) + "\n" + body
    return nb


def _chinese(rel, lab: int):
    """The Chinese hand-out with the solution's code (one cell structure), wrong."""
    zh = nbformat.read(rel.student.with_name(f"lab{lab}_zh.ipynb"), as_version=4)
    solution = nbformat.read(rel.solution, as_version=4)
    assert [c.cell_type for c in zh.cells] == [c.cell_type for c in solution.cells]
    for mine, theirs in zip(zh.cells, solution.cells):
        if mine.cell_type == "code":
            mine.source = theirs.source
    return _wrong(zh, lab)


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    """{lab: its release} of the labs in WRONG, built into a temporary dist."""
    dist = tmp_path_factory.mktemp("language") / "dist"
    return built(list(WRONG), dist)  # every lab built once per run, shared


@pytest.fixture(scope="module")
def graded(releases):
    """{lab: {"zh"|"en": (Result, page, results.json)}}, each lab one class run."""
    if sandbox.why_unavailable():
        pytest.skip(sandbox.why_unavailable())
    base = next(iter(releases.values())).autograder.parents[2]
    dist = base / "dist"
    out = {}
    for lab, rel in releases.items():
        folder = base / f"lab{lab}"
        folder.mkdir()
        nbformat.write(_chinese(rel, lab), folder / "zh.ipynb")
        nbformat.write(_wrong(nbformat.read(rel.solution, as_version=4), lab),
                       folder / "en.ipynb")
        results = classrun.grade(lab, folder, out=base / "out", workers=2, dist=dist)
        pages = base / "out" / build.lab_name(lab) / "latest" / "feedback"
        out[lab] = {r.student.removesuffix(".ipynb"): (
            r, (pages / f"{r.student[:-6]}.md").read_text(),
            json.loads((pages / f"{r.student[:-6]}.json").read_text()))
            for r in results}
        out[lab]["cases"] = answers.read_cases(rel.autograder)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("lab", sorted(WRONG))
def test_a_chinese_hand_in_reads_why_it_lost_points_in_chinese(graded, lab):
    (zh, page, data), (en, en_page, _) = graded[lab]["zh"], graded[lab]["en"]
    fix, english = WRONG[lab][2:]
    assert zh.lang == "zh" and en.lang == "en"
    assert 0 < zh.total == en.total < zh.possible, zh.why
    assert zh.why == en.why and zh.cases == en.cases   # the same marks and reasons
    assert fix in page and english not in page, page
    assert english in en_page and fix not in en_page, en_page
    lost = [t for t in data["tests"] if t["score"] < t["max_score"]]
    assert lost and all(CJK.search(t["name"]) for t in lost), lost
    assert any(fix in t["output"] for t in lost), lost
    assert all(t["output"].startswith("未通过：") for t in lost), lost
    marker = f"{gettext('what went wrong', 'zh')}："
    for line in page.splitlines():  # every reason that has words has Chinese ones
        said = line.partition(marker)[2]
        if said and said != "AssertionError":
            assert CJK.search(said), line


@pytest.mark.slow
@pytest.mark.parametrize("lab", sorted(WRONG))
def test_an_english_hand_in_gets_the_page_it_got_before_the_catalog(
        graded, lab, monkeypatch):
    """The English page is the one the grader wrote before the labs' catalog: the
    same page rendered with the catalog's functions made to fail if asked."""
    r, page, data = graded[lab]["en"]
    cases = graded[lab]["cases"]

    def asked(*args):
        raise AssertionError(f"the English page asked the labs' catalog: {args}")

    monkeypatch.setattr(lab_messages, "translate", asked)
    monkeypatch.setattr(lab_messages, "describe", asked)
    monkeypatch.setattr(lab_messages, "catalog", asked)
    assert feedback.markdown(lab, cases, r) == page
    assert feedback.results_json(cases, r) == data
    assert all(t["name"].split(": ", 1)[1] == c.message
               for t, c in zip(data["tests"], cases))


@pytest.mark.slow
def test_the_autograder_zip_carries_both_catalogs(releases, tmp_path):
    """On Gradescope the grader runs from the zip, without the repository: the zip
    holds the grader's and the lab tests' compiled catalogs, and lab_messages
    finds them there (a Chinese hand-in's page would otherwise be English)."""
    import subprocess
    import zipfile

    with zipfile.ZipFile(releases[1].autograder) as z:
        names = set(z.namelist())
        z.extractall(tmp_path / "source")
    assert {"grading/locale/zh_CN/LC_MESSAGES/grading.mo",
            "grading/locale/zh_CN/LC_MESSAGES/lab_tests.mo"} <= names, sorted(names)
    probe = ("from grading import lab_messages as m\n"
             "print(m.LOCALE.relative_to(m.Path.cwd()))\n"
             "print(m.describe('other shapes, and float64', 'zh'))\n")
    got = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path / "source",
                         capture_output=True, text=True, check=True).stdout.split()
    assert got == ["grading/locale", "其他形状，以及", "float64"], got
