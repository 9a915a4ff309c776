"""Runs INSIDE the hand-in's sandbox: the student's cells, then answers to the tests.

This process holds the student's code and nothing of the grader: no test, no
points, no seed. Line 1 on stdin holds the cells (the hand-in's, then the
hand-out's own, so the tests' helpers are the instructor's); each top-level
statement runs on its own, so one that fails (or calls exit) costs that statement,
named in the feedback, not the rest of its cell. Then it reports its names and
answers the tests' process over the wire (wire.py): "call fold_constants with this
graph" comes in as data, the result goes back as data. Whatever the code does to
this process (patch torch, walk the stack, print) stays in this process.
"""

import ast
import builtins
import hashlib
import json
import os
import random
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire  # noqa: E402
import wire_code  # noqa: E402, F401  (wire_side imports it; the jail mounts it)

_BUILTINS = set(dir(builtins))
USED = set()


# ---------------------------------------------------------------- forbidden calls

def guard_forbidden(names):
    """Wrap forbidden library functions: a call from the student's cells is noted.

    It runs in the student's process, so a determined hand-in can unwrap them; the
    grader also reads the source for them (answers.py)."""
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


# ---------------------------------------------------------------- the cells

def _exit(*args, **kwargs):
    raise SystemExit("os._exit called")


def _no_fork(*args, **kwargs):
    raise OSError("os.fork is disabled while grading (a lab never needs it)")


def run_cells(cells, ns, out, skip):
    """Run each top-level statement; report where we are and what failed."""
    for label, source in cells:
        try:
            tree = ast.parse(source, label)
        except SyntaxError:  # answers.py has reported it already
            continue
        for stmt in tree.body:
            if [label, stmt.lineno] in skip:
                continue
            wire.send(out, {"op": "cell", "label": label, "line": stmt.lineno})
            try:
                code = compile(ast.Module([stmt], type_ignores=[]), label, "exec")
                exec(code, ns)
            except BaseException as e:  # SystemExit, KeyboardInterrupt: noted too
                kind, where, text = wire.describe(e)
                where = where or f" ({label[1:-1]} line {stmt.lineno})"
                wire.send(out, {"op": "cell_error", "label": label,
                                "line": stmt.lineno,
                                "error": f"{kind}{where}: {text}"[:400]})


def user_namespace():
    """The cells' globals, as a real module named __main__ (as IPython's user module):
    TorchDynamo (torch.cond, torch.compile) reads a function's globals through
    sys.modules[fn.__module__]."""
    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module
    return module.__dict__


def exported(ns, provided: dict) -> dict:
    """The hand-in's own names, as data or handles (modules and builtins left out)."""
    out = {}
    for name, value in list(ns.items()):
        if name.startswith("__") or name in _BUILTINS or isinstance(
                value, types.ModuleType) or provided.get(name) is value:
            continue
        try:
            out[name] = SIDE.encode(value)
        except Exception:  # a value that is no data: the tests may still call it
            out[name] = SIDE.handle(value)
    return out


def _capture(model, *args, **kwargs):
    """The tests' graphopt.capture of one of the hand-in's models, run here."""
    import graphopt
    return graphopt.capture(model, *args, **kwargs)


def _seed(text: str):
    import numpy
    import torch
    s = int(hashlib.sha256(text.encode()).hexdigest()[:15], 16)
    random.seed(s)
    torch.manual_seed(s)
    numpy.random.seed(s % 2**32)


SIDE = None


def main():
    global SIDE
    requests, replies = int(sys.argv[1]), int(sys.argv[2])
    first = json.loads(sys.stdin.readline())
    import numpy  # noqa: F401
    import torch  # noqa: F401

    import graphopt  # noqa: F401
    guard_forbidden(sorted(first.get("forbidden", ())))
    ns = user_namespace()
    os._exit = _exit  # `_ = os._exit(0)` in a cell ends that statement, not the run
    import posix
    os.fork = posix.fork = _no_fork  # a fork bomb fails at once
    run_cells(first["student"], ns, replies, first.get("skip", []))
    before = dict(ns)
    run_cells(first["provided"], ns, replies, [])  # the hand-out's helpers win
    provided = {k: v for k, v in ns.items() if before.get(k, wire) is not v}
    SIDE = wire.Side(named={k: v for k, v in provided.items()
                            if isinstance(v, (type, types.FunctionType))},
                     trusting=True)
    SIDE.scope = dict(ns)  # where the tests' classes and functions are copied
    conn = wire.Conn(SIDE, requests, replies)
    wire.send(replies, {"op": "ready", "names": exported(ns, provided),
                        "used": sorted(USED), "capture": SIDE.handle(_capture)})
    while True:
        try:
            msg = wire.receive(requests)
        except EOFError:
            return
        if msg.get("op") == "seed":
            _seed(str(msg["text"]))
            wire.send(replies, {"op": "result", "value": None, "used": []})
            continue
        USED.clear()
        conn.answer(msg, used=lambda: set(USED))


if __name__ == "__main__":
    main()
