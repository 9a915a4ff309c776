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
import secrets
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import answers, sandbox
from .build import FORBIDDEN, lab_number, release

RUNNER = Path(__file__).with_name("runner.py")
_RUNNER_IN_JAIL = "/grader/runner.py"
LOG_LIMIT = 256 << 10     # bytes of a submission's output kept in its log
RECORD_LIMIT = 4 << 20    # bytes of result records a sandbox may send
STARTUP = 90.0            # seconds to import torch and graphopt on a busy machine
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
    seconds: float = 0.0
    cpu: float = 0.0             # CPU seconds of its test process (as it reports)


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
    case_timeout: float = 60.0   # seconds per test case
    cell_timeout: float = 120.0  # seconds per notebook cell
    limits: sandbox.Limits = field(default_factory=sandbox.Limits)
    unsafe: bool = False

    @classmethod
    def for_lab(cls, lab, dist, logs, secret: bytes | None = None, **settings):
        rel = release(lab, dist)
        seed = (hmac.new(secret, f"lab{lab}".encode(), "sha256").hexdigest()
                if secret else "public")
        return cls(lab_number(lab), answers.read_cases(rel.autograder),
                   answers.provided(rel.student), answers.answer_names(rel.student),
                   FORBIDDEN.get(lab_number(lab), ()), Path(logs), seed, **settings)


def task_label(task: str) -> str:
    """'task_2_1' -> 'Task 2.1', the ID the notebook's header uses."""
    parts = task.split("_")
    return f"Task {parts[1]}.{parts[2]}" if len(parts) == 3 else task


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
    if why:
        result.status, result.reason = "not a notebook", why
        return _score(result, ctx, {}, start)
    try:
        sub = answers.read_submission(path, ctx.names, ctx.forbidden)
    except Exception as e:  # an unreadable notebook that still validated
        result.status, result.reason = "not a notebook", f"unreadable: {e}"[:200]
        return _score(result, ctx, {}, start)
    result.review += sub.warnings + sub.problems
    result.review += [f"{c.label[1:-1]} {d}" for c in sub.cells for d in c.dropped]
    verdicts: dict[str, str] = {}   # case id -> "" (passed) or why it failed
    log = ctx.logs / (student.replace("/", "__") + ".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        while len(verdicts) < len(ctx.cases):
            left = ctx.timeout - (time.monotonic() - start)
            if left <= 0:
                for case in ctx.cases:
                    verdicts.setdefault(case.id, f"not run: the {ctx.timeout:.0f} s "
                                        "for the submission were spent")
                break
            fatal = _attempt(sub, ctx, uid, verdicts, out, left, result)
            if fatal:
                result.status, result.reason = "crashed", fatal
                for case in ctx.cases:
                    verdicts.setdefault(case.id, fatal)
                break
    for task, what in sub.forbidden.items():
        for case in ctx.cases:
            if case.task == task:
                verdicts[case.id] = f"uses {what}, which this lab forbids"
    for case_id, error in verdicts.items():
        if error.startswith("NameError") and sub.problems:  # why the name is missing
            verdicts[case_id] = f"{error} ({sub.problems[0]})"
    if sub.problems and result.status == "graded" and not result.reason:
        result.reason = "; ".join(sub.problems)
    return _score(result, ctx, verdicts, start)


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
    if result.status == "graded" and any("time" in w for w in result.why.values()):
        result.status = "partial"
    result.seconds = time.monotonic() - start
    return result


def _attempt(sub, ctx, uid, verdicts, out, budget, result) -> str | None:
    """One sandbox run from the first case without a verdict; a fatal reason or None."""
    read_fd, write_fd = os.pipe()
    argv = [sys.executable, _RUNNER_IN_JAIL, str(write_fd)]
    if ctx.unsafe:
        argv[1] = str(RUNNER)
        cmd = sandbox.unsafe_command(argv, ctx.limits, uid)
        env = {**os.environ, **_ENV, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    else:
        binds = ((str(RUNNER), _RUNNER_IN_JAIL),)
        cmd, env = sandbox.command(argv, uid, ctx.limits, _ENV, binds), None
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, pass_fds=(write_fd,), env=env,
                            cwd="/tmp", start_new_session=True)
    os.close(write_fd)
    drain = threading.Thread(target=_drain, args=(proc.stdout, out), daemon=True)
    drain.start()
    session = _Session(proc, read_fd, ctx, verdicts, budget, result)
    try:
        first = {"student": [(c.label, c.source) for c in sub.cells],
                 "provided": ctx.provided, "forbidden": list(ctx.forbidden)}
        return session.run(json.dumps(first))
    except _Tamper as e:
        for case in ctx.cases:
            verdicts.setdefault(case.id, f"result channel tampered with: {e}")
        result.review.append(f"result channel tampered with: {e}")
        return None
    finally:
        _reap(proc, result, grace=1)  # bwrap's death ends every process in the jail
        if ctx.unsafe:
            sandbox.kill_uid(uid)
        drain.join(5)
        os.close(read_fd)


class _Session:
    """Reads one sandbox's records: per-cell and per-case deadlines, nonce, order."""

    def __init__(self, proc, fd, ctx, verdicts, budget, result):
        self.proc, self.fd, self.ctx, self.verdicts = proc, fd, ctx, verdicts
        self.end = time.monotonic() + budget
        self.result, self.buffer, self.received = result, b"", 0
        self.nonce = secrets.token_hex(16)
        self.where = "before the first cell"   # what is running now

    def run(self, first: str) -> str | None:
        self._send(first)
        running = None   # case id started and not done
        deadline = self.deadline = None
        for record in self._records():
            if record is None:   # a deadline passed
                return self._timeout(running)
            if "cell" in record and not running:
                self.where = record["cell"][1:-1]
                deadline = min(self.end, time.monotonic() + self.ctx.cell_timeout)
            elif "cell_error" in record:
                self.result.review.append(
                    f"{record['kind']} {record['error']}")
            elif record.get("ready"):
                self._ready(record)
                deadline = self._deadline()
            elif record.get("nonce") != self.nonce:
                self.result.review.append("a result record without the run's nonce "
                                          "(forged by the submission?) was ignored")
            elif "start" in record:
                running, deadline = self._start(record["start"]), self._deadline()
            elif "done" in record:
                if record["done"] != running:
                    return "results out of order: the test process was tampered with"
                self.verdicts[running] = record["error"] if not record["passed"] else ""
                running, deadline = None, self._deadline()
            elif record.get("finished"):
                self.result.cpu += float(record.get("cpu", 0.0))
                return None
            if deadline is not None:
                self.deadline = deadline
        return self._died(running)

    def _deadline(self):
        return min(self.end, time.monotonic() + self.ctx.case_timeout)

    def _send(self, text: str):
        try:
            self.proc.stdin.write(text.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def _ready(self, record):
        for change in record.get("tampered", []):
            self.result.review.append(f"patched {change} outside the tests "
                                      "(restored before the tests ran)")
        for used in record.get("forbidden", []):
            self.result.review.append(f"called {used} outside the tests")
        cases = [{"id": c.id, "hidden": c.hidden, "examples": c.examples}
                 for c in self.ctx.cases]
        self.where = "the tests"
        self._send(json.dumps({"nonce": self.nonce, "seed": self.ctx.seed,
                               "cases": cases, "skip": sorted(self.verdicts)}))

    def _start(self, case_id):
        expected = next((c.id for c in self.ctx.cases if c.id not in self.verdicts),
                        None)
        if case_id != expected:
            raise _Tamper(f"case {case_id} started, {expected} expected")
        return case_id

    def _records(self):
        """Each record as a dict; None when the current deadline has passed."""
        self.deadline = min(self.end, time.monotonic() + max(STARTUP,
                                                             self.ctx.case_timeout))
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                try:
                    yield json.loads(line)
                except ValueError:
                    self.result.review.append("an unreadable result record was ignored")
            wait = self.deadline - time.monotonic()
            if wait <= 0:
                yield None
                return
            ready, _, _ = select.select([self.fd], [], [], wait)
            if ready:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    return
                self.received += len(chunk)
                if self.received > RECORD_LIMIT:
                    raise _Tamper("flooded the result channel")
                self.buffer += chunk

    def _timeout(self, running) -> str | None:
        spent = time.monotonic() >= self.end
        if running:
            self.verdicts[running] = (f"timeout: still running after "
                                      f"{self.ctx.case_timeout:.0f} s (killed)")
            return None
        what = (f"the {self.ctx.timeout:.0f} s for the submission" if spent
                else f"{self.ctx.cell_timeout:.0f} s")
        return f"timeout in {self.where}: still running after {what} (killed)"

    def _died(self, running) -> str | None:
        how = _exit_text(_reap(self.proc, self.result, grace=5))
        if running:
            self.verdicts[running] = f"the test process {how} during this case"
            return None
        return f"the process {how} in {self.where}"


def _reap(proc, result, grace: float):
    """The exit code, after `grace` seconds at most (then killed)."""
    if proc.returncode is not None:
        return proc.returncode
    end = time.monotonic() + grace
    while True:
        pid, status = os.waitpid(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() >= end:
            proc.kill()
            pid, status = os.waitpid(proc.pid, 0)
            break
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode


class _Tamper(Exception):
    pass


def _exit_text(code) -> str:
    if isinstance(code, int) and code < 0:
        name = {9: "SIGKILL: out of memory or CPU time?", 24: "SIGXCPU: CPU time",
                25: "SIGXFSZ: file too large"}.get(-code, f"signal {-code}")
        return f"was killed ({name})"
    if code == 137:
        return "was killed (out of memory or CPU time?)"
    return f"exited with code {code}"


def _drain(stream, out):
    """Keep the first LOG_LIMIT bytes of the submission's output, count the rest."""
    kept = dropped = 0
    for chunk in iter(lambda: stream.read(65536), b""):
        room = max(0, LOG_LIMIT - kept)
        out.write(chunk[:room])
        kept += min(room, len(chunk))
        dropped += max(0, len(chunk) - room)
    if dropped:
        out.write(f"\n[grader: {dropped} more bytes of output dropped]\n".encode())
    out.flush()


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
