"""The gradebook: who handed in what and when, and one CSV an LMS imports.

Three layouts of a class folder are read:

* a Gradescope export ("Download Submissions": a zip whose one folder,
  `assignment_<n>_export/`, holds submission_metadata.yml and a folder per
  submission): the YAML maps each `submission_<n>` to `:submitters:` (a list of
  `:name:`, `:sid:`, `:email:`; several for a group), `:created_at:` (a timestamp
  with its zone), `:score:` and `:history:` (earlier submissions, ignored). The
  folder given may be the export's root or the folder that holds it;
* a Canvas or Moodle download: files `<name>_<LATE_>?<user id>_<n>_<file>` (Canvas)
  or folders `<Full Name>_<id>_assignsubmission_file_` (Moodle);
* a plain folder: one notebook or one sub-folder per student, named by its id.

A student's folder with several notebooks is graded on the newest one (the
metadata's time, else the file's). Times without a time zone are taken as UTC.
"""

from __future__ import annotations

import csv
import math
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

_CANVAS = re.compile(r"^(?P<name>[a-z0-9]+)_(?:late_)?(?P<id>\d+)_\d+_.+\.ipynb$")
_MOODLE = re.compile(r"^(?P<name>.+?)_(?P<id>\d+)_assignsubmission_file_?$")
COLUMNS = ["student id", "name", "score", "max", "submitted", "days late",
           "late penalty", "final", "hand-in"]


@dataclass
class Entry:
    """One student's hand-in to grade."""

    key: str                  # the hand-in's path in the class folder
    path: Path
    student_id: str
    name: str = ""
    submitted: datetime | None = None


def collect(folder: Path) -> list[Entry]:
    """Every student's newest hand-in, whichever layout the folder has."""
    folder = Path(folder)
    meta = folder / "submission_metadata.yml"
    if meta.exists():
        return _gradescope(folder, meta)
    roots = [d for d in folder.glob("*/submission_metadata.yml")]
    if len(roots) == 1 and len([p for p in folder.iterdir()
                                if not p.name.startswith(".")]) == 1:
        return _gradescope(roots[0].parent, roots[0])  # the unzipped export's root
    entries = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith((".", "__")):
            continue
        entries.append(_entry(folder, path))
    return _unique_ids(entries)


def _unique_ids(entries: list[Entry]) -> list[Entry]:
    """`dup.ipynb` and `dup/lab3.ipynb` are two students' rows: the one in a folder
    takes its path as id (`dup/lab3`), so no two rows of the sheet share an id."""
    count: dict[str, int] = {}
    for e in entries:
        count[e.student_id] = count.get(e.student_id, 0) + 1
    seen: set[str] = set()
    for e in entries:
        if count[e.student_id] > 1 and "/" in e.key:
            e.student_id = e.key.removesuffix(".ipynb")
        if e.student_id in seen:  # still taken: the whole path is unique
            e.student_id = e.key
        seen.add(e.student_id)
    return entries


def others(entry: Entry) -> list[str]:
    """The other notebooks in the folder the hand-in was picked from (newest wins)."""
    folder = entry.path.parent
    if entry.path.name == entry.key:  # a notebook straight in the class folder
        return []
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*.ipynb")
                  if p != entry.path)


def _newest(path: Path) -> Path:
    """The newest notebook under a student's folder (the folder if it has none)."""
    notebooks = sorted(path.rglob("*.ipynb"), key=lambda p: (p.stat().st_mtime, p))
    return notebooks[-1] if notebooks else path


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)


def _entry(folder: Path, path: Path) -> Entry:
    hand_in = _newest(path) if path.is_dir() else path
    key = str(hand_in.relative_to(folder))
    canvas, moodle = _CANVAS.match(path.name.lower()), _MOODLE.match(path.name)
    match = canvas or moodle
    if match:
        name = match["name"] if moodle else match["name"].title()
        return Entry(key, hand_in, match["id"], name, _mtime(hand_in))
    return Entry(key, hand_in, path.name.removesuffix(".ipynb"), "", _mtime(hand_in))


def _gradescope(folder: Path, meta: Path) -> list[Entry]:
    import yaml

    data = yaml.safe_load(meta.read_text()) or {}
    entries = []
    for sub, info in sorted(data.items()):
        info = {str(k).strip(":"): v for k, v in (info or {}).items()}
        people = [{str(k).strip(":"): v for k, v in p.items()}
                  for p in info.get("submitters") or []]
        path = folder / sub
        if not path.exists():
            continue
        hand_in = _newest(path) if path.is_dir() else path
        for person in people or [{}]:  # a group hand-in: one row per member
            entries.append(Entry(str(hand_in.relative_to(folder)), hand_in,
                                 str(person.get("sid") or person.get("email") or sub),
                                 str(person.get("name") or ""),
                                 _time(info.get("created_at"))))
    return entries


def _time(value) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(" ".join(value.split()[:2]) + (
                value.split()[2] if len(value.split()) > 2 else ""))
        except ValueError:
            return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value


def parse_deadline(text: str | None) -> datetime | None:
    """'2026-12-01T23:59' or '2026-12-01 23:59+01:00'; UTC when no zone is given."""
    return _time(datetime.fromisoformat(text)) if text else None


def days_late(submitted: datetime | None, deadline: datetime | None) -> int:
    """Days started after the deadline (1 minute late is 1 day)."""
    if not submitted or not deadline or submitted <= deadline:
        return 0
    return math.ceil((submitted - deadline).total_seconds() / 86400)


def rows(entries: list[Entry], results: dict, deadline=None,
         penalty: float = 0.0) -> list[dict]:
    """One row per student; `penalty` is the percent of the score lost per day."""
    out = []
    for e in entries:
        r = results[e.key]
        late = days_late(e.submitted, deadline)
        lost = round(r.total * min(1.0, late * penalty / 100), 2)
        out.append({"student id": e.student_id, "name": e.name,
                    "score": f"{r.total:g}", "max": f"{r.possible:g}",
                    "submitted": e.submitted.isoformat() if e.submitted else "",
                    "days late": late, "late penalty": f"{lost:g}",
                    "final": f"{r.total - lost:g}", "hand-in": e.key})
    return out


def write(path: Path, new_rows: list[dict], merge: bool = False) -> None:
    """gradebook.csv; with merge, the rows of an existing sheet are kept or replaced."""
    kept = []
    if merge and path.exists():
        ids = {r["student id"] for r in new_rows}
        kept = [r for r in csv.DictReader(open(path, newline=""))
                if r["student id"] not in ids]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        w.writerows(sorted(kept + new_rows, key=lambda r: r["student id"]))
    os.replace(tmp, path)
