"""One run of the two sandboxes seen from the grader: records, deadlines, exit.

The records arrive on a pipe only the tests' process (runner.py) was given; it
passes on where the hand-in's cells are. A case that passes its deadline ends the
run (grade.py starts fresh sandboxes for the next case); a top-level statement that
passes its deadline, or ends the hand-in's process, is returned as (cell, line, why)
so the next run skips it. Records of the tests must carry the run's nonce and come
in the order the grader gave (public cases first).
"""

from __future__ import annotations

import json
import os
import secrets
import select
import time

LOG_LIMIT = 256 << 10     # bytes of a submission's output kept in its log
RECORD_LIMIT = 4 << 20    # bytes of result records a sandbox may send
STARTUP = 90.0            # seconds to import torch and graphopt on a busy machine


class Session:
    """Reads one sandbox's records: per-cell and per-case deadlines, nonce, order."""

    def __init__(self, proc, fd, ctx, verdicts, budget, result):
        self.proc, self.fd, self.ctx, self.verdicts = proc, fd, ctx, verdicts
        self.end = time.monotonic() + budget
        self.result, self.buffer, self.received = result, b"", 0
        self.nonce = secrets.token_hex(16)
        self.where = "before the first cell"   # what is running now
        self.current = None                    # (cell, line) of the hand-in

    def run(self, first: str) -> str | None:
        self._send(first)
        running = None   # case id started and not done
        deadline = self.deadline = None
        for record in self._records():
            if record is None:   # a deadline passed
                return self._timeout(running)
            if "cell" in record and not running:
                self.current = (str(record["cell"]), int(record.get("line", 0)))
                self.where = f"{self.current[0][1:-1]} line {self.current[1]}"
                deadline = min(self.end, time.monotonic() + self.ctx.cell_timeout)
            elif "cell_error" in record:
                self._note(f"not run to its end: {record['error']}; the grader went "
                           "on without it")
            elif "handin_lost" in record:  # before "ready": no nonce yet
                if self.current and self.current[0].startswith("<cell"):
                    return (*self.current, "ended the hand-in's process or wrote "
                            "into the grader's channel")
                return ("the hand-in's process ended before the tests "
                        f"({record['handin_lost']})")
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
            elif record.get("restart"):
                return None   # the hand-in's process died: a fresh one goes on
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

    def _note(self, text: str):
        """A line for the student's feedback and the instructor's review, once."""
        if text not in self.result.notes:
            self.result.notes.append(text)
            self.result.review.append(text)

    def _ready(self, record):
        for change in record.get("tampered", []):  # inprocess.py's guard
            self.result.review.append(f"patched {change} outside the tests "
                                      "(restored before the tests ran)")
        for used in record.get("forbidden", []):
            if f"called {used} outside the tests" not in self.result.review:
                self.result.review.append(f"called {used} outside the tests")
        for note in record.get("notes", []):
            self._note(str(note))
        cases = [{"id": c.id, "hidden": c.hidden, "examples": c.examples}
                 for c in self.ctx.order]
        self.where, self.current = "the tests", None
        self._send(json.dumps({"nonce": self.nonce, "seed": self.ctx.seed,
                               "cases": cases, "skip": sorted(self.verdicts)}))

    def _start(self, case_id):
        expected = next((c.id for c in self.ctx.order if c.id not in self.verdicts),
                        None)
        if case_id != expected:
            raise Tamper(f"case {case_id} started, {expected} expected")
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
                    raise Tamper("flooded the result channel")
                self.buffer += chunk

    def _timeout(self, running):
        spent = time.monotonic() >= self.end
        if running:
            self.verdicts[running] = (f"timeout: still running after "
                                      f"{self.ctx.case_timeout:.0f} s (killed)")
            return None
        if self.current and not spent and self.current[0].startswith("<cell"):
            # a slow statement of the hand-in: the next run goes on without it
            return (*self.current, f"was still running after "
                    f"{self.ctx.cell_timeout:.0f} s")
        what = (f"the {self.ctx.timeout:.0f} s for the submission" if spent
                else f"{self.ctx.cell_timeout:.0f} s")
        return f"timeout in {self.where}: still running after {what} (killed)"

    def _died(self, running) -> str | None:
        how = _exit_text(reap(self.proc, self.result, grace=5))
        if running:
            self.verdicts[running] = f"the test process {how} during this case"
            return None
        return f"the process {how} in {self.where}"


def reap(proc, result, grace: float):
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


class Tamper(Exception):
    pass


def _exit_text(code) -> str:
    if isinstance(code, int) and code < 0:
        name = {9: "SIGKILL: out of memory or CPU time?", 24: "SIGXCPU: CPU time",
                25: "SIGXFSZ: file too large"}.get(-code, f"signal {-code}")
        return f"was killed ({name})"
    if code == 137:
        return "was killed (out of memory or CPU time?)"
    return f"exited with code {code}"


def drain(stream, out):
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
