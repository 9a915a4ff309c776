"""Grade one submission in its sandbox, and a whole class in parallel.

The points come from the autograder's own table (the zip's tests, hashed before and
after the run); the sandbox only says, per case id, passed or not and why. A case
that runs past its time limit is failed with a reason and the sandbox starts again
from the next case, so the tasks that finished keep their points.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import answers, language, sandbox
from .build import FORBIDDEN, FORBIDDEN_IN, PREDICTIONS, lab_number, release
from .session import Session, Tamper, drain, reap

RUNNER = Path(__file__).with_name("runner.py")     # the tests' process
STUDENT = Path(__file__).with_name("student.py")   # the hand-in's process
WIRE = tuple(Path(__file__).with_name(f"{name}.py")  # what both speak
             for name in ("wire", "wire_side", "wire_graph", "wire_code",
                          "wire_nodes"))
_JAIL = "/grader"
TESTS_UID_OFFSET = 32   # the tests' process runs as another user than the hand-in
MAX_SKIPPED = 3         # statements past their time skipped before giving up
_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0", "HOME": "/tmp", "MPLBACKEND": "Agg",
        "NUMBA_CACHE_DIR": "/tmp/numba", "PYTHONDONTWRITEBYTECODE": "1",
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/inductor", "PATH": "/usr/bin:/bin"}


@dataclass
class Result:
    """One student's grade: total, per task, per case, and a reason for each zero."""

    student: str                 # path relative to the class folder
    status: str = "graded"       # graded | partial | not a notebook | crashed
    reason: str = ""
    total: float = 0.0
    possible: float = 0.0
    tasks: dict[str, float] = field(default_factory=dict)
    cases: dict[str, float] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)   # case label -> why it failed
    review: list[str] = field(default_factory=list)     # for the instructor's eyes
    notes: list[str] = field(default_factory=list)      # for the student's feedback
    seconds: float = 0.0
    cpu: float = 0.0             # CPU seconds of its test process (as it reports)
    lang: str = "en"             # the hand-in's language: its feedback's


@dataclass
class Context:
    """Everything one class run shares: the autograder's table and the settings."""

    lab: int
    cases: list[answers.Case]
    provided: list[tuple[str, str]]
    names: dict[str, set[str]]
    forbidden: tuple[str, ...]
    logs: Path
    seed: str = "public"
    timeout: float = 300.0       # seconds per submission, all restarts together
    case_timeout: float = 120.0  # seconds per test case (lab 7.3 #3: 15-25 s idle)
    cell_timeout: float = 120.0  # seconds per notebook cell
    limits: sandbox.Limits = field(default_factory=sandbox.Limits)
    unsafe: bool = False
    forbidden_in: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def order(self) -> list[answers.Case]:
        """The order cases run in: every public case before any hidden one, so no
        public case's feedback can carry what the hand-in saw of a hidden input."""
        return sorted(self.cases, key=lambda case: case.hidden)

    @classmethod
    def for_lab(cls, lab, dist, logs, secret: bytes | None = None, **settings):
        rel = release(lab, dist)
        seed = (hmac.new(secret, f"lab{lab}".encode(), "sha256").hexdigest()
                if secret else "public")
        return cls(lab_number(lab), answers.read_cases(rel.autograder),
                   answers.provided(rel.student), answers.answer_names(rel.student),
                   FORBIDDEN.get(lab_number(lab), ()), Path(logs), seed,
                   forbidden_in=FORBIDDEN_IN.get(lab_number(lab), {}), **settings)


def task_label(task: str) -> str:
    """'task_2_1' -> 'Task 2.1', the ID the notebook's header uses."""
    parts = task.split("_")
    return f"Task {parts[1]}.{parts[2]}" if len(parts) == 3 else task


def forbidden_in_task(task: str, what: str) -> str:
    """The reason a task's answer loses its points for using what the task forbids."""
    return (f"uses {what}, which {task_label(task)} forbids in its answer: compute "
            f"the result yourself, as the task says; call {what} only in a separate "
            "cell, to check your answer")


def case_label(case: answers.Case) -> str:
    """'Task 2.1 #3 hidden: random ops are never folded (2 pt)'."""
    kind = "hidden" if case.hidden else "public"
    what = f": {case.message}" if case.message else ""
    return f"{task_label(case.task)} #{case.index} {kind}{what} ({case.points:g} pt)"


def grade_one(student: str, path: Path, ctx: Context, uid: int) -> Result:
    """Grade one submission; never raises."""
    start = time.monotonic()
    result = Result(student, possible=sum(c.points for c in ctx.cases))
    why = answers.not_a_notebook(path)
    result.lang = "en" if why else language.of_handin(path)
    if why:
        result.status, result.reason = "not a notebook", why
        return _score(result, ctx, {}, start)
    try:
        sub = answers.read_submission(path, ctx.names, ctx.forbidden,
                                      ctx.forbidden_in)
    except Exception as e:  # an unreadable notebook that still validated
        result.status, result.reason = "not a notebook", f"unreadable: {e}"[:200]
        return _score(result, ctx, {}, start)
    computed = answers.pin_predictions(sub, PREDICTIONS.get(ctx.lab, ()))
    sub.notes += list(computed.values())
    dropped = [f"{c.label[1:-1]} {d}" for c in sub.cells for d in c.dropped]
    result.review += sub.warnings + sub.problems + sub.notes + dropped
    result.notes = sub.problems + sub.notes + [f"not run: {d}" for d in dropped]
    wrong = answers.wrong_lab(sub, ctx.names, ctx.lab)
    if wrong:
        result.status, result.reason = "wrong lab", wrong
        return _score(result, ctx, {}, start)
    verdicts: dict[str, str] = {}   # case id -> "" (passed) or why it failed
    log = ctx.logs / (student.replace("/", "__") + ".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    skip: list[tuple[str, int]] = []   # statements that ran past their time
    with open(log, "wb") as out, open(log.with_suffix(".tests.log"), "wb") as tests:
        while len(verdicts) < len(ctx.cases):
            left = ctx.timeout - (time.monotonic() - start)
            if left <= 0:
                for case in ctx.cases:
                    verdicts.setdefault(case.id, f"not run: the {ctx.timeout:.0f} s "
                                        "for the submission were spent")
                break
            fatal = _attempt(sub, ctx, uid, verdicts, (out, tests), left, result,
                             skip)
            if isinstance(fatal, tuple) and len(skip) < MAX_SKIPPED:
                skip.append(fatal[:2])
                result.notes.append(
                    f"not run: {fatal[0][1:-1]} line {fatal[1]} {fatal[2]}: the "
                    "grader ran the notebook again without that statement")
                result.review.append(result.notes[-1])
                continue
            if fatal:
                fatal = fatal if isinstance(fatal, str) else "too many slow cells"
                result.status, result.reason = "crashed", fatal
                for case in ctx.cases:
                    verdicts.setdefault(case.id, fatal)
                break
    for task, what in sub.forbidden.items():
        for case in ctx.cases:
            if case.task == task:
                verdicts[case.id] = f"uses {what}, which this lab forbids"
    for task, what in sub.forbidden_in.items():
        for case in ctx.cases:
            if case.task == task:
                verdicts[case.id] = forbidden_in_task(task, what)
    for case in ctx.cases:  # a prediction's checks read it by name
        for name, why in computed.items():
            if any(re.search(rf"\b{name}\b", src) for src, _ in case.examples):
                verdicts[case.id] = why
    for case_id, error in verdicts.items():
        if error.startswith("NameError"):  # why the name is missing
            verdicts[case_id] = _why_missing(error, sub)
    if sub.problems and result.status == "graded" and not result.reason:
        result.reason = "; ".join(sub.problems)
    return _score(result, ctx, verdicts, start)


def _why_missing(error: str, sub) -> str:
    """A NameError with its likely cause: a helper defined too late, a syntax error."""
    name = re.search(r"name '(\w+)' is not defined", error)
    late = [n for n in sub.notes if name and f": {name[1]} is used" in n]
    cause = (late or sub.problems)[:1]
    return f"{error} ({cause[0]})" if cause else error


def _score(result: Result, ctx: Context, verdicts: dict[str, str], start) -> Result:
    """Points from the grader's own table, never from what the sandbox claims."""
    for case in ctx.cases:
        label = case_label(case)
        error = verdicts.get(case.id, result.reason or "not run")
        result.cases[label] = 0.0 if error else case.points
        if error:
            result.why[label] = error
        task = task_label(case.task)
        result.tasks[task] = result.tasks.get(task, 0.0) + result.cases[label]
    result.total = sum(result.tasks.values())
    timed_out = ("timeout", "not run: the")  # not "time" in w: RuntimeError has it
    if result.status == "graded" and any(w.startswith(timed_out)
                                         for w in result.why.values()):
        result.status = "partial"
    result.seconds = time.monotonic() - start
    return result


def _jail(script, fds, ctx, uid):
    """The command line that runs one of our scripts (in /grader) jailed."""
    argv = [sys.executable, f"{_JAIL}/{script.name}", *map(str, fds)]
    if ctx.unsafe:
        argv[1] = str(script)
        cmd = sandbox.unsafe_command(argv, ctx.limits, uid)
        env = {**os.environ, **_ENV, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        return cmd, env
    binds = tuple((str(p), f"{_JAIL}/{p.name}")
                  for p in (script, *WIRE))
    return sandbox.command(argv, uid, ctx.limits, _ENV, binds), None


def _attempt(sub, ctx, uid, verdicts, logs, budget, result, skip):
    """One run of the two sandboxes from the first case without a verdict.

    The hand-in runs in one (student.py), the tests in the other (runner.py); they
    speak over two pipes the grader made, and only the tests' process reports here.
    Returns a fatal reason, a (cell, line) that ran past its time, or None."""
    to_handin, from_tests = os.pipe()      # tests -> hand-in (requests)
    from_handin, to_tests = os.pipe()      # hand-in -> tests (answers)
    read_fd, write_fd = os.pipe()          # tests -> grader (results)
    handin_cmd, handin_env = _jail(STUDENT, (to_handin, to_tests), ctx, uid)
    tests_cmd, tests_env = _jail(RUNNER, (write_fd, from_tests, from_handin), ctx,
                                 uid + TESTS_UID_OFFSET)
    handin = subprocess.Popen(handin_cmd, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, pass_fds=(to_handin, to_tests),
                              env=handin_env, cwd="/tmp", start_new_session=True)
    tests = subprocess.Popen(tests_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT,
                             pass_fds=(write_fd, from_tests, from_handin),
                             env=tests_env, cwd="/tmp", start_new_session=True)
    for fd in (to_handin, to_tests, from_tests, from_handin, write_fd):
        os.close(fd)
    handin_first = {"student": [(c.label, c.source) for c in sub.cells],
                    "provided": ctx.provided, "skip": [list(s) for s in skip],
                    "forbidden": sorted(set(ctx.forbidden).union(
                        *ctx.forbidden_in.values()))}
    try:
        handin.stdin.write(json.dumps(handin_first).encode() + b"\n")
        handin.stdin.close()
    except OSError:
        pass
    readers = [threading.Thread(target=drain, args=(proc.stdout, log), daemon=True)
               for proc, log in ((handin, logs[0]), (tests, logs[1]))]
    for reader in readers:
        reader.start()
    session = Session(tests, read_fd, ctx, verdicts, budget, result)
    try:
        first = {"provided": ctx.provided,
                 "answers": sorted(set().union(*ctx.names.values())),
                 "forbidden": list(ctx.forbidden),
                 "forbidden_in": {task: list(names)
                                  for task, names in ctx.forbidden_in.items()}}
        return session.run(json.dumps(first))
    except Tamper as e:
        for case in ctx.cases:
            verdicts.setdefault(case.id, f"result channel tampered with: {e}")
        result.review.append(f"result channel tampered with: {e}")
        return None
    finally:
        for proc in (tests, handin):  # bwrap's death ends every process in its jail
            reap(proc, result, grace=1)
        if ctx.unsafe:
            sandbox.kill_uid(uid)
            sandbox.kill_uid(uid + TESTS_UID_OFFSET)
        for reader in readers:
            reader.join(5)
        os.close(read_fd)


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
