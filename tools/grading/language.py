"""The feedback's language: the hand-in's own (a Chinese hand-out gets Chinese).

The grader words everything in English (the msgid); the Chinese entries live in
locale/zh_CN/LC_MESSAGES/grading.po, compiled to grading.mo beside it (graphopt's
i18n.Catalog reads it; `pybabel compile -d tools/grading/locale -D grading`). A
hand-in is Chinese when its Markdown is: the hand-out built with LANG=zh keeps the
code and the tests in English and translates the prose. A reason is translated
when it matches one of the grader's own templates below; the words of a test's
assertion and its one-line description come from the labs' own catalog
(lab_messages.py), which feedback.py asks when no template matches.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

LOCALE = Path(__file__).with_name("locale")
_CJK = re.compile(r"[\u4e00-\u9fff]")


def N_(message: str) -> str:
    """Marks a literal for extraction; translated where it is shown."""
    return message


def catalog():
    from graphopt.i18n import Catalog
    return Catalog("grading", LOCALE)


def gettext(message: str, lang: str) -> str:
    """`message` in `lang` ("en" or "zh"), whatever GRAPHOPT_LANG says."""
    if lang == "en":
        return message
    try:
        return catalog().gettext(message, lang=lang)
    except OSError:  # no compiled catalog here: the page stays English, not lost
        return message


def of_handin(path: Path) -> str:
    """"zh" when the hand-in's Markdown is mostly Chinese, else "en"."""
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # not a notebook: its feedback says so in English
        return "en"
    text = "".join(c.source for c in nb.cells if c.cell_type == "markdown")
    return "zh" if len(_CJK.findall(text)) > 200 else "en"


# The grader's reasons, with their fields: a reason that matches one is shown in
# the hand-in's language, its fields (names, numbers, the student's own error)
# as they were.
TEMPLATES = [
    N_("{kind} raised by your code{where}"),
    N_("{kind} while the hidden test ran"),
    N_("timeout: still running after {seconds} s (killed){rest}"),
    N_("uses {what}, which this lab forbids"),
    N_("not run: {where} line {line}: an IPython magic (% or !), which runs only "
       "in Jupyter"),
    N_("not run: {where} line {line}: uses otter's grader (the grader runs the "
       "tests itself)"),
    N_("not run: {where} line {line} was still running after {seconds} s: the "
       "grader ran the notebook again without that statement"),
    N_("not run: {where} line {line} ended the hand-in's process or wrote into the "
       "grader's channel: the grader ran the notebook again without that statement"),
    N_("not run: the {seconds} s for the submission were spent"),
    N_("not run: {what}"),
    N_("not run to its end: {error}; the grader went on without it"),
    N_("the hand-in's process ended during this case (it exited, crashed or ran "
       "out of memory)"),
    N_("printed something else than the test expects"),
    N_("printed {got}, expected {want}"),
    N_("your function changed {what} it was given: leave the caller's objects as "
       "they were (work on a copy, copy.deepcopy)"),
    N_("used forbidden {names}: the task's answer must compute this itself"),
    N_("uses {what}, which {task} forbids in its answer: compute the result "
       "yourself, as the task says; call {what} only in a separate cell, to check "
       "your answer"),
    N_("syntax error in cell {cell} line {line}: {error}"),
    N_("redefined: {name} is defined in {where}; the grader tests the last one "
       "({last}): delete or rename the other definitions"),
    N_("used before defined: {name} is used in {where} line {line} but defined "
       "only later, in {first}: after Restart & Run All this raises NameError; "
       "move the definition above its use"),
    N_("{name} is a prediction: write it out by hand, as a literal (numbers, "
       "True/False, tuples, a dict of them), before running anything; {where} "
       "line {line} computes it{how}"),
    N_(" (it calls {calls})"),
    N_("timeout in {where}: still running after {what} (killed)"),
    N_("the {seconds} s for the submission"),
    N_("{error} (in your code)"),
]
HEADINGS = [N_("Lab {lab}: feedback for {student}"), N_("Score"), N_("Warnings"),
            N_("passed"), N_("FAILED"), N_("what went wrong"), N_("hidden test"),
            N_("public test"), N_("Not graded normally"),
            N_("Before handing in: Kernel > Restart & Run All, check that every "
               "cell runs, then save.")]


def _pattern(template: str) -> re.Pattern:
    parts = re.split(r"\{(\w+)\}", template)
    out, seen = "", set()
    for i, part in enumerate(parts):
        if i % 2 == 0:
            out += re.escape(part)
        else:   # a field named twice holds the same text twice
            out += f"(?P={part})" if part in seen else f"(?P<{part}>.*?)"
            seen.add(part)
    return re.compile(out + "$", re.S)


_PATTERNS = [(t, _pattern(t)) for t in TEMPLATES]
_NESTED = ("error", "what", "how")   # fields that may hold a reason of their own


def reason(text: str, lang: str) -> str:
    """A reason in `lang`: its template translated, its fields kept; a reason of
    the lab's own words (an assertion's message) as it was."""
    if lang == "en" or not text:
        return text
    for template, pattern in _PATTERNS:
        found = pattern.match(text)
        if found:
            fields = {k: reason(v, lang) if k in _NESTED else v
                      for k, v in found.groupdict().items()}
            return gettext(template, lang).format(**fields)
    return text
