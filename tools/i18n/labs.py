"""The labs' student hand-outs in Chinese: one catalog per lab, one code.

The English text is the lab master's markdown (labs/<lab>/labN.ipynb), extracted into
labs/locales/zh_CN/LC_MESSAGES/<lab>.po. The Chinese hand-out is made from the English
hand-out that `otter assign` wrote (`make labs`), not from a second assignment: its
code cells, public tests and otter metadata are that file's own, so one autograder
grades both and a test only has to compare them (tests/test_i18n_labs.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from . import catalog
from .notebooks import Report, msgids, translate_notebook

ROOT = Path(__file__).resolve().parents[2]
LOCALES = ROOT / "labs" / "locales" / catalog.LOCALE / "LC_MESSAGES"
SUFFIX = "_zh"  # labs/dist/<lab>/student/labN_zh.ipynb, beside labN.ipynb

# What otter assign adds to the hand-out's text (not in the master): its own phrases.
_OTTER_PHRASES = ((re.compile(r"_Points:_ (\d+)"), r"_分值：_ \1"),)


def catalog_path(lab_name: str) -> Path:
    return LOCALES / f"{lab_name}.po"


def extract(master: Path, lab_name: str) -> int:
    """Write the lab's catalog from its master's markdown; the number of entries."""
    nb = json.loads(Path(master).read_text(encoding="utf-8"))
    return len(catalog.update(catalog_path(lab_name), msgids(nb)))


def chinese_name(student: Path) -> Path:
    return student.with_name(f"{student.stem}{SUFFIX}{student.suffix}")


def write_handout(student: Path, lab_name: str) -> Report:
    """Write the Chinese hand-out beside the English `student` notebook."""
    translations = catalog.reviewed(catalog.read(catalog_path(lab_name)))

    def lookup(msgid: str) -> str | None:
        if msgid in translations:
            return translations[msgid]
        for pattern, replacement in _OTTER_PHRASES:
            if pattern.fullmatch(msgid):
                return pattern.sub(replacement, msgid)
        return None

    out = chinese_name(Path(student))
    text, report = translate_notebook(Path(student).read_text(encoding="utf-8"),
                                      lookup, out.name)
    out.write_text(text, encoding="utf-8")
    return report
