"""Runs the tests, in a sandbox of its own: no student code ever runs here.

The hand-in runs in another process (student.py, another sandbox). This one runs
the hand-out's own cells, then the test cases; every name the hand-in defines is
a handle (wire.py): calling `fold_constants(gm)` sends a copy of gm to the
hand-in's process and gets a copy of its answer back, rebuilt here from data. No
frame, builtin, hook or test object of this process is reachable from the hand-in.

Protocol with the grader (grade.py): line 1 on stdin holds the hand-out's cells
and the names of the answers; the records of the hand-in's cells are passed on,
then "ready" goes to the result fd, and only then line 2 arrives: the test cases,
a nonce and a seed. One JSON record per event goes to the result fd.
"""

import builtins
import doctest
import functools
import hashlib
import io
import json
import os
import random
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire  # noqa: E402
import wire_code  # noqa: E402

_BUILTINS = dict(vars(builtins))
NONCE = ""
_FD = 3   # the result pipe to the grader (main reads it from argv)


def send(**record):
    record["nonce"] = NONCE
    os.write(_FD, (json.dumps(record) + "\n").encode())


def _banned(used, lab_wide, in_task):
    """The calls in `used` ('graphopt.run (called from cell 5)') this case forbids."""
    names = set(lab_wide) | set(in_task)
    return sorted(u for u in used if u.split(" (called from")[0] in names)


def _short(e) -> str:
    """What went wrong in a case, as the student may read it (public cases)."""
    if isinstance(e, wire.HandinError):
        return f"{e} (in your code)"
    text = " ".join(str(e).split())[:200]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _seed(seed: str, case_id: str, conn):
    import numpy
    import torch
    text = f"{seed}:{case_id}"
    s = int(hashlib.sha256(text.encode()).hexdigest()[:15], 16)
    random.seed(s)
    torch.manual_seed(s)
    numpy.random.seed(s % 2**32)
    wire.send(conn.wfd, {"op": "seed", "text": hashlib.sha256(
        f"student:{text}".encode()).hexdigest()})
    conn.wait()


def run_case(case, ns, checker, side=None):
    """'' when the case passed, else why (an exception, kept for the caller)."""
    ns = dict(ns)
    ns["__builtins__"] = dict(_BUILTINS)
    out = io.StringIO()
    stdout, hook = sys.stdout, sys.displayhook
    sys.stdout, sys.displayhook = out, lambda v: v is None or print(repr(v), file=out)
    filename = "<hidden test>" if case["hidden"] else "<public test>"
    current = ""
    try:
        for source, want in case["examples"]:
            out.seek(0)
            out.truncate()
            current = source
            exec(compile(source, filename, "single"), ns)
            if side is not None:  # its classes and functions may cross as mirrors
                wire_code.register_sources(side, source, ns)
            got = out.getvalue()
            if not checker.check_output(want, got, 0):
                if case["hidden"]:
                    return "printed something else than the test expects"
                return f"printed {got[:80]!r}, expected {want[:80]!r}"
        return ""
    except BaseException as e:
        e.grader_source = current  # which example failed: its words, if hidden
        return e
    finally:
        sys.stdout, sys.displayhook = stdout, hook


def hidden_reason(e) -> str:
    """What a student may read of a hidden case's failure: the assertion's own words
    (the literal parts of its message, never a value), or where their code failed."""
    if isinstance(e, wire.HandinError):
        return f"{e.kind} raised by your code{e.where}"
    if isinstance(e, wire.GraderNote):  # the grader's own words, no test data
        return f"{type(e).__name__}: {e}"
    if isinstance(e, AssertionError):
        return "AssertionError" + _literal_message(e)
    return f"{type(e).__name__} while the hidden test ran"


def _literal_message(e) -> str:
    """': <the message's literal text>' of the assert or raise that failed."""
    import ast
    import traceback
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if f.filename == "<hidden test>"]
    try:
        tree = ast.parse(getattr(e, "grader_source", ""))
    except SyntaxError:
        return ""
    if not frames:
        return ""
    line = frames[-1].lineno
    for node in ast.walk(tree):
        if not (isinstance(node, (ast.Assert, ast.Raise))
                and node.lineno <= line <= (node.end_lineno or node.lineno)):
            continue
        msg = node.msg if isinstance(node, ast.Assert) else (
            node.exc.args[0] if isinstance(node.exc, ast.Call) and node.exc.args
            else None)
        text = _template(msg) if msg is not None else ""
        return f": {text}" if text else ""
    return ""


def _template(msg) -> str:
    """The constant text of a message: f"got {x}" -> 'got ...'."""
    import ast
    if isinstance(msg, ast.Constant) and isinstance(msg.value, str):
        return msg.value
    if isinstance(msg, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "..."
                       for v in msg.values)
    return ""


def user_namespace():
    """The hand-out's globals, as a real module named __main__."""
    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = dict(_BUILTINS)
    sys.modules["__main__"] = module
    return module.__dict__


def wait_for_handin(conn, ns, answers):
    """Pass on the hand-in's cell records; install its names in `ns`."""
    def other(msg):
        op = msg.get("op")
        if op == "cell":
            send(cell=str(msg["label"]), line=int(msg["line"]))
        elif op == "cell_error":
            send(cell_error=str(msg["label"]), line=int(msg["line"]),
                 error=str(msg["error"])[:400])
        elif op == "ready":
            return msg
        else:
            raise wire.WireError(f"an unexpected message {op!r} before the tests")
        return None

    conn.on_other = other
    ready = conn.wait()
    conn.on_other = None
    notes = []
    _capture_there(conn.side.decode(ready["capture"]) if "capture" in ready else None)
    for name, value in ready["names"].items():
        name = str(name)
        if not name.isidentifier() or name.startswith("__") or name in _BUILTINS:
            continue  # a name that would shadow a builtin the tests and helpers use
        if name in ns and name not in answers:
            continue  # the hand-out's own helper: the tests use the instructor's
        try:
            ns[name] = conn.side.decode(value)
        except Exception as e:  # data that breaks the wire's rules
            notes.append(f"{name} could not be read by the tests: {e}"[:300])
    return [str(u) for u in ready.get("used", ())], notes


def _capture_there(remote):
    """graphopt.capture of the hand-in's model runs in the hand-in's process (its
    Python is student code): the graph comes back as data."""
    import graphopt
    here = graphopt.capture

    @functools.wraps(here)
    def capture(model, *args, **kwargs):
        if remote is not None and isinstance(model, wire.Remote):
            return remote(model, *args, **kwargs)
        return here(model, *args, **kwargs)
    graphopt.capture = capture


def main():
    global NONCE, _FD
    _FD, to_handin, from_handin = (int(a) for a in sys.argv[1:4])
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import torch.export  # noqa: F401

    import graphopt  # noqa: F401
    first = json.loads(sys.stdin.readline())
    scoped = first.get("forbidden_in", {})  # {task: names only it forbids}
    ns = user_namespace()
    for label, source in first["provided"]:
        exec(compile(source, label, "exec"), ns)
    side = wire.Side(named={k: v for k, v in ns.items()
                            if isinstance(v, (type, types.FunctionType))},
                     trusting=False)
    conn = wire.Conn(side, from_handin, to_handin)
    try:
        used, notes = wait_for_handin(conn, ns, set(first.get("answers", ())))
    except Exception as e:  # it died, or wrote into the wire: skip what it ran
        send(handin_lost=conn.broken or f"{type(e).__name__}: {e}"[:200])
        return
    send(ready=True, forbidden=used, notes=notes)
    second = json.loads(sys.stdin.readline())
    NONCE = second["nonce"]
    skip, checker = set(second["skip"]), doctest.OutputChecker()
    for case in second["cases"]:
        if case["id"] in skip:
            continue
        conn.used.clear()
        send(start=case["id"])
        start = time.monotonic()
        try:
            _seed(second["seed"], case["id"], conn)
            error = run_case(case, ns, checker, conn.side)
        except (EOFError, OSError, wire.WireError) as e:
            error = e
        if conn.broken or isinstance(error, (EOFError, BrokenPipeError)):
            error = ("the hand-in's process ended during this case (it exited, "
                     "crashed or ran out of memory)")
        if isinstance(error, BaseException):
            error = hidden_reason(error) if case["hidden"] \
                else _short(error)
        banned = _banned(conn.used, first.get("forbidden", ()),
                         scoped.get(case["id"].split("#")[0], ()))
        if banned:  # the task forbids it: that is the reason, whatever else failed
            error = ("used forbidden " + ", ".join(banned)
                     + ": the task's answer must compute this itself")
        send(done=case["id"], passed=not error, error=error,
             seconds=round(time.monotonic() - start, 3))
        if error.startswith("the hand-in's process ended"):
            send(restart=True)  # a fresh hand-in process for the next case
            return
    send(finished=True, cpu=time.process_time())


if __name__ == "__main__":
    main()
