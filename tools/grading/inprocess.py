"""The older grader, for the labs whose tests hand the student's functions objects
that cannot cross between two processes (fx nodes, models of classes the test
defines, enums): the student's code and the tests share one process here.

Labs 3-5 are graded with two processes (student.py, runner.py); this runner keeps a
tamper guard instead, which a determined student can get around (the instructors'
page says so). Runs inside the sandbox, as a stand-alone script.

Protocol (the grader's side is grade.py): line 1 on stdin holds the student's cells
and the hand-out's own cells; the runner runs them, reports "ready" on fd 3, and
only then reads line 2: the test cases, a nonce and a seed. One JSON record per
event goes to fd 3 (a pipe only the grader reads; the student's prints go to
stdout). Before any student code runs, the runner keeps its own references to
what it needs and a snapshot of every callable in the modules tests rely on;
after the cells and after each case it compares, restores, and fails a case
during which anything was patched. It imports nothing from the grading package:
the sandbox mounts this one file.
"""

import builtins
import doctest
import hashlib
import io
import json
import os
import random
import sys
import time
import traceback
import types

_write, _dumps, _loads = os.write, json.dumps, json.loads
_readline = sys.stdin.buffer.readline
_BUILTINS = dict(vars(builtins))
_WATCH = ("builtins", "doctest", "operator", "copy", "math", "functools", "os",
          "json", "random", "torch", "torch.testing", "torch.fx", "torch.nn",
          "torch.nn.functional", "torch.nn.modules.module", "torch._tensor",
          "numpy", "graphopt")
_SUBPACKAGES = ("torch.testing.", "torch.fx.", "graphopt.")
_IGNORED_KEYS = ("__slotnames__", "_abc_", "__orig_")
_MISSING = object()
NONCE = ""
_FD = int(sys.argv[1]) if len(sys.argv) > 1 else 3


_PID = os.getpid()


def send(**record):
    if os.getpid() != _PID:  # a fork of the runner (a fork bomb's child) stays mute
        os._exit(0)
    record["nonce"] = NONCE
    _write(_FD, (_dumps(record) + "\n").encode())


# ---------------------------------------------------------------- tamper guard

def _watched():
    """The modules whose callables tests use, and the classes they define."""
    mods = [m for name, m in list(sys.modules.items())
            if isinstance(m, types.ModuleType)
            and (name in _WATCH or name.startswith(_SUBPACKAGES))]
    objs = list(mods)
    for m in mods:
        for v in list(vars(m).values()):
            if isinstance(v, type) and getattr(v, "__module__", None) == m.__name__:
                objs.append(v)
    import torch
    return objs + [torch.Tensor, torch.nn.Module]


def snapshot():
    return [(obj, {k: v for k, v in vars(obj).items() if callable(v)}, set(vars(obj)))
            for obj in _watched()]


def tampered(snap) -> list[str]:
    """What changed since `snap`, each restored; [] when nothing did."""
    changes = []
    for obj, callables, keys in snap:
        now = vars(obj)
        name = getattr(obj, "__qualname__", getattr(obj, "__name__", "?"))
        for key, value in callables.items():
            if now.get(key, _MISSING) is not value:
                changes.append(f"{name}.{key}")
                setattr(obj, key, value)
        is_class = isinstance(obj, type) or obj is builtins
        for key in set(now) - keys if is_class else ():
            if callable(now[key]) and not key.startswith(_IGNORED_KEYS):
                changes.append(f"{name}.{key} (added)")
                delattr(obj, key)
    return changes


# ---------------------------------------------------------------- forbidden calls

USED = set()


def guard_forbidden(names):
    """Wrap forbidden library functions: a call from the student's cells is noted."""
    import importlib
    for full in names:
        parent, _, attr = full.rpartition(".")
        try:  # graphopt imports its subpackages lazily: load them to wrap them
            importlib.import_module(full)
        except ImportError:
            pass
        mods = [m for n, m in list(sys.modules.items())
                if n == full or n.startswith(full + ".")]
        targets = [(m, k) for m in mods for k, v in list(vars(m).items())
                   if callable(v) and not k.startswith("_")]
        if not mods and parent in sys.modules:  # a function, or a lazy name
            try:
                getattr(sys.modules[parent], attr)
                targets = [(sys.modules[parent], attr)]
            except Exception:  # not importable here: nothing a hand-in can call
                targets = []
        for owner, key in targets:
            setattr(owner, key, _spy(getattr(owner, key), full))


def _banned(used, lab_wide, in_task):
    """The calls in `used` ('graphopt.run (called from cell 5)') this case forbids."""
    names = set(lab_wide) | set(in_task)
    return sorted(u for u in used if u.split(" (called from")[0] in names)


def _spy(fn, label):
    if isinstance(fn, type):
        return fn

    def spy(*args, **kwargs):
        caller = sys._getframe(1).f_code.co_filename
        if caller.startswith("<cell"):
            USED.add(f"{label} (called from {caller[1:-1]})")
        return fn(*args, **kwargs)
    spy.__wrapped__, spy.__name__, spy.__doc__ = fn, getattr(fn, "__name__", label), \
        getattr(fn, "__doc__", None)
    return spy


# ---------------------------------------------------------------- running code

def run_cells(cells, ns, kind, skip=()):
    for label, source in cells:
        if [label, 0] in skip:  # it ran past its time or ended the process before
            continue
        send(cell=label, line=0)
        try:
            exec(compile(source, label, "exec"), ns)
        except BaseException as e:  # SystemExit, KeyboardInterrupt: recorded too
            send(cell_error=label, kind=kind, error=_short(e, label))
        if os.getpid() != _PID:
            os._exit(0)


def _short(e, label="") -> str:
    if isinstance(e, SystemExit):
        return f"exit() called in {label[1:-1]}" if label else "exit() called"
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if f.filename.startswith("<cell")]
    where = f" ({frames[-1].filename[1:-1]} line {frames[-1].lineno})" if frames else ""
    text = " ".join(str(e).split())[:200]
    name = f"{type(e).__name__}{where}"
    return f"{name}: {text}" if text else name


def _seed(seed: str, case_id: str):
    import numpy
    import torch
    s = int(hashlib.sha256(f"{seed}:{case_id}".encode()).hexdigest()[:15], 16)
    random.seed(s)
    torch.manual_seed(s)
    numpy.random.seed(s % 2**32)


def run_case(case, ns, seed, checker):
    # The test's own globals: what the cells defined, minus any rebinding of a
    # builtin, plus fresh builtins. Student functions keep theirs (ns): what they
    # do to their globals while a test runs never reaches the test's names.
    ns = {k: v for k, v in ns.items()
          if not (k in _BUILTINS and v is not _BUILTINS[k])}
    ns["__builtins__"] = dict(_BUILTINS)
    _seed(seed, case["id"])
    out = io.StringIO()
    stdout, hook = sys.stdout, sys.displayhook
    sys.stdout, sys.displayhook = out, lambda v: v is None or print(repr(v), file=out)
    filename = "<hidden test>" if case["hidden"] else "<public test>"
    try:
        for source, want in case["examples"]:
            out.seek(0)
            out.truncate()
            exec(compile(source, filename, "single"), ns)
            got = out.getvalue()
            if not checker.check_output(want, got, 0):
                return f"printed {got[:80]!r}, expected {want[:80]!r}"
        return ""
    except BaseException as e:
        return _short(e)
    finally:
        sys.stdout, sys.displayhook = stdout, hook


def user_namespace():
    """The cells' globals, as a real module named __main__ (as IPython's user module):
    TorchDynamo (torch.cond, torch.compile) reads a function's globals through
    sys.modules[fn.__module__], and the runner's own __main__ has none of them."""
    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = dict(_BUILTINS)
    sys.modules["__main__"] = module
    return module.__dict__


def warm_dynamo(cells):
    """TorchDynamo patches nn.Module.__init__ and __setstate__ and fx's Tracer.trace
    the first time it runs (torch.cond runs it even in eager mode). When the lab uses
    it, let that happen before the snapshot, or every case would look tampered."""
    used = ("torch.cond", "torch.compile", "torch._dynamo", "torch.while_loop")
    if not any(name in source for _, source in cells for name in used):
        return  # not for recompile() or numba's compile: TorchDynamo costs a second
    import torch
    try:
        torch.cond(torch.tensor(True), lambda x: x + 1, lambda x: x - 1,
                   (torch.zeros(1),))
    except Exception:  # a torch without cond: nothing was patched either
        pass


def _no_fork(*args, **kwargs):
    raise OSError("os.fork is disabled while grading (a lab never needs it)")


def main():
    global NONCE
    import posix
    os.fork = posix.fork = _no_fork  # a fork bomb in a cell fails at once
    import numpy  # noqa: F401  (imported before the snapshot: watched)
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401  (it rewraps torch.manual_seed on import)
    import torch.export  # noqa: F401

    import graphopt  # noqa: F401
    first = _loads(_readline())
    scoped = first.get("forbidden_in", {})  # {task: names only it forbids}
    guard_forbidden(sorted(set(first.get("forbidden", ())).union(*scoped.values())))
    warm_dynamo(first["student"] + first["provided"])
    snap, checker = snapshot(), doctest.OutputChecker()
    ns = user_namespace()
    run_cells(first["student"], ns, "student", first.get("skip", []))
    changes = tampered(snap)  # restored before the hand-out's cells run
    run_cells(first["provided"], ns, "provided")  # the hand-out's helpers win
    changes += tampered(snap)
    send(ready=True, tampered=changes, forbidden=sorted(USED))
    second = _loads(_readline())
    NONCE = second["nonce"]
    skip = set(second["skip"])
    for case in second["cases"]:
        if case["id"] in skip:
            continue
        if os.getpid() != _PID:
            os._exit(0)
        USED.clear()
        send(start=case["id"])
        start = time.monotonic()
        error = run_case(case, ns, second["seed"], checker)
        changes = tampered(snap)
        if changes:
            error = "patched " + ", ".join(changes[:5]) + " during the test"
        elif _banned(USED, first.get("forbidden", ()),
                     scoped.get(case["id"].split("#")[0], ())):
            error = ("used forbidden " + ", ".join(_banned(
                USED, first.get("forbidden", ()),
                scoped.get(case["id"].split("#")[0], ())))
                + ": the task's answer must compute this itself")
        send(done=case["id"], passed=not error, error=error,
             seconds=round(time.monotonic() - start, 3))
    send(finished=True, cpu=time.process_time())  # for the grading-time estimate


if __name__ == "__main__":
    main()
