"""Feedback for each student: one Markdown page and one results.json per hand-in.

The JSON uses Gradescope's results.json fields (score, output, tests[] with name,
score, max_score, output, visibility), so the same words reach a student whether
the course grades on Gradescope or with `make grade`. Per test: what it checks (the
case's description), its points, and what went wrong: the assertion's message, the
cell and line of an error in the student's code, and the cell-order warnings of
answers.py. A hidden test shows its description and its failure, never its code.
A Chinese hand-in reads all of it in Chinese: the grader's words from its catalog
(language.py), the tests' descriptions and assertion messages from the labs'
(lab_messages.py); an English one reads the English as the tests wrote it.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import answers, lab_messages
from .grade import Result, case_label, task_label
from .language import gettext, reason

ADVICE = ("Before handing in: Kernel > Restart & Run All, check that every cell "
          "runs, then save.")


def why(text: str, case: answers.Case, lang: str) -> str:
    """Why a case lost its points, in `lang`: the grader's words (language.py),
    else the words of the case's own assertion (lab_messages.py)."""
    if lang == "en":   # the tests' words as they wrote them: no catalog asked
        return text
    said = reason(text, lang)
    return said if said != text else lab_messages.translate(text, case.examples,
                                                           lang)


def _colon(lang: str) -> str:
    return "：" if lang == "zh" else ": "   # full width after Chinese


def _entries(cases: list[answers.Case], r: Result):
    """Per case: it, its points, what it checks and why it lost them ('' when it
    passed), in the hand-in's language."""
    for case in cases:
        label = case_label(case)
        what = (case.message if r.lang == "en"
                else lab_messages.describe(case.message, r.lang))
        yield (case, r.cases.get(label, 0.0), what,
               why(r.why.get(label, ""), case, r.lang))


def _test_name(case: answers.Case, what: str, lang: str) -> str:
    """'public test #1: what it checks', in `lang`."""
    kind = (gettext("hidden test", lang) if case.hidden
            else gettext("public test", lang))
    return f"{kind} #{case.index}{_colon(lang)}{what}"


def tests(cases: list[answers.Case], r: Result) -> list[dict]:
    """Gradescope's tests[]: one entry per case of the autograder's table."""
    out, lang = [], r.lang
    failed = "failed: " if lang == "en" else gettext("FAILED", lang) + _colon(lang)
    for case, points, what, lost in _entries(cases, r):
        out.append({"name": f"{task_label(case.task)} {_test_name(case, what, lang)}",
                    "score": points, "max_score": case.points,
                    "output": f"{failed}{lost}" if lost else gettext("passed", lang),
                    "visibility": "after_published" if case.hidden else "visible"})
    return out


def results_json(cases, r: Result, extra: str = "") -> dict:
    """The whole results.json of one hand-in."""
    warning = "warning: " if r.lang == "en" else gettext("Warnings", r.lang) + "："
    lines = [reason(r.reason, r.lang)] if r.reason else []
    lines += [f"{warning}{reason(note, r.lang)}" for note in r.notes]
    if r.total < r.possible:
        lines.append(gettext(ADVICE, r.lang))
    return {"score": r.total, "output": "\n".join(lines + ([extra] if extra else [])),
            "tests": tests(cases, r)}


def markdown(lab: int, cases, r: Result) -> str:
    """A page a student can act on: score, warnings, then every test by task, in
    the hand-in's language (the grader's words and the tests')."""
    def _(message):
        return gettext(message, r.lang)
    colon = _colon(r.lang)
    lines = [_("Lab {lab}: feedback for {student}").format(lab=lab, student=r.student),
             "", f"**{_('Score')}{colon}{r.total:g} / {r.possible:g}**", ""]
    if r.reason:
        lines += [f"{_('Not graded normally')}{colon}{reason(r.reason, r.lang)}", ""]
    if r.notes:
        lines += [f"## {_('Warnings')}", ""] + [
            f"- {reason(note, r.lang)}" for note in r.notes] + [""]
    by_task: dict[str, list] = {}
    for entry in _entries(cases, r):
        by_task.setdefault(task_label(entry[0].task), []).append(entry)
    for task, entries in by_task.items():
        got = sum(points for _c, points, _w, _l in entries)
        top = sum(case.points for case, *_ in entries)
        lines += [f"## {task}: {got:g} / {top:g}", ""]
        for case, points, what, lost in entries:
            mark = _("FAILED") if lost else _("passed")
            lines.append(f"- {mark} ({points:g}/{case.points:g} pt) "
                         f"{_test_name(case, what, r.lang)}")
            if lost:
                lines.append(f"  - {_('what went wrong')}{colon}{lost}")
        lines.append("")
    if r.total < r.possible:
        lines += [_(ADVICE), ""]
    return "\n".join(lines)


def file_stem(student: str) -> str:
    """'alice/lab2.ipynb' -> 'alice__lab2': one flat file name per hand-in."""
    return student.removesuffix(".ipynb").replace("/", "__")


def write_all(folder: Path, lab: int, cases, results: list[Result]) -> None:
    """folder/<student>.md and folder/<student>.json for every hand-in."""
    folder.mkdir(parents=True, exist_ok=True)
    for r in results:
        stem = file_stem(r.student)
        (folder / f"{stem}.md").write_text(markdown(lab, cases, r))
        data = json.dumps(results_json(cases, r), indent=1)
        (folder / f"{stem}.json").write_text(data)
