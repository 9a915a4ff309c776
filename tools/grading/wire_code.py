"""What crosses beside plain values (wire.py): fx nodes, enums, the tests' code.

Labs 1, 2, 6 and 7 hand the student's functions a node (`classify(node)`), a
model whose Python the student must capture (`try_capture(_Cut(), x)`, control
flow and all) or a function to time. From the tests to the hand-in only:
- a node crosses with its graph (once per graph and version) and comes back as
  the tests' own node, found by name;
- a model or function of the tests (or the hand-out) crosses as a MIRROR: a copy
  of its code to trace (the test's source, or the hand-out's by name) whose calls
  on real tensors go back to the tests' object (what it counts happens there);
- nodes and enum members: wire_nodes.py.
The hand-in's objects never cross as code: the tests' side accepts only the tags
that name its own objects ("back", "node_back") and enums.
"""

import ast
import functools
import gc
import hashlib
import linecache
import re
import types

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NO = types.SimpleNamespace(co_consts=())
_SCALARS = (int, float, bool, str, complex, type(None))


from wire_nodes import CodeError  # noqa: E402  (one error for both files)

# ---------------------------------------------------------------- the tests' code

def register_sources(side, source: str, ns: dict) -> None:
    """Remember the code of each class and function an example of a test defines,
    so that its objects can cross as mirrors (the tests' side, runner.py)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            obj = ns.get(node.name)
            text = ast.get_source_segment(source, node)
            if text and isinstance(obj, type | types.FunctionType):
                side.sources[id(obj)] = (obj, node.name, text)


def _free_names(source: str) -> list[str]:
    tree = ast.parse(source)
    loads = {n.id for n in ast.walk(tree)
             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return sorted(loads)


def _globals(side, source: str, scope: dict) -> dict:
    """The values a test's class or function reads from the test's namespace:
    numbers and tensors by value, lists, dicts and sets by handle (what the code
    appends lands in the tests' own list), modules and hand-out names left to the
    hand-in's side (it has its own)."""
    out = {}
    for name in _free_names(source):
        if name not in scope:
            continue
        value = scope[name]
        if isinstance(value, types.ModuleType) or side.named.get(name) is value:
            continue
        if type(value) in (list, dict, set):
            out[name] = side.handle(value)
        else:
            out[name] = side.encode(value)
    return out


def encode_mirror(side, obj):
    """A mirror of a module or function of the tests (or the hand-out), or None."""
    if isinstance(obj, torch.nn.Module):
        cls = type(obj)
        code = _code_of(side, cls)
        if code is None:
            return None
        return {"$": "mirror", "kind": "module", "id": side.handle(obj)["id"],
                **code, "state": side.encode({k: v for k, v in vars(obj).items()
                                              if not k.startswith("_compiled")})}
    if isinstance(obj, types.FunctionType) and side.named.get(obj.__name__) is not obj:
        code = _code_of(side, obj)
        if code is None:
            return _encode_closure(side, obj)
        return {"$": "mirror", "kind": "function", "id": side.handle(obj)["id"],
                **code}
    return None


def _encode_closure(side, fn):
    """A function a hand-out function made (`sleeper(0.02)`): its code is the
    hand-in's too; its cells cross as values, or by handle when the tests hold
    them (`calls=_calls`), so that what it appends lands in the tests' list."""
    factory, _, name = fn.__qualname__.partition(".<locals>.")
    maker = side.named.get(factory)
    if not isinstance(maker, types.FunctionType) or "." in name or not any(
            c is fn.__code__ for c in maker.__code__.co_consts):
        return None
    cells = []
    for cell in fn.__closure__ or ():
        value = cell.cell_contents
        if value is fn:
            cells.append({"$": "self"})
        elif type(value) in (list, dict, set) and _held_elsewhere(value, cell):
            cells.append(side.handle(value))
        else:
            cells.append(side.encode(value))
    return {"$": "mirror", "kind": "closure", "id": side.handle(fn)["id"],
            "name": factory, "qualname": fn.__qualname__, "cells": cells,
            "defaults": side.encode(fn.__defaults__)}


def _held_elsewhere(value, cell) -> bool:
    return any(r is not cell and not isinstance(r, types.FrameType)
               for r in gc.get_referrers(value))


def _decode_closure(side, value, remote):
    maker = side.named.get(str(value["name"]))
    code = next((c for c in getattr(maker, "__code__", _NO).co_consts
                 if isinstance(c, types.CodeType)
                 and c.co_qualname == str(value["qualname"])), None)
    if code is None or len(value["cells"]) != len(code.co_freevars):
        raise CodeError(f"no hand-out code {value['qualname']!r}")
    cells = [types.CellType() for _ in value["cells"]]
    fn = types.FunctionType(code, maker.__globals__, code.co_name,
                            side.decode(value["defaults"]), tuple(cells))
    for cell, v in zip(cells, value["cells"]):
        is_self = isinstance(v, dict) and v.get("$") == "self"
        cell.cell_contents = fn if is_self else side.decode(v)
    fn._wire_back = remote
    return fn


def _code_of(side, obj):
    name = getattr(obj, "__name__", None)
    if isinstance(name, str) and side.named.get(name) is obj:
        return {"name": name, "source": None, "globals": {}}
    found = side.sources.get(id(obj))
    if found is None or found[0] is not obj:
        return None
    scope = getattr(obj, "__globals__", None)
    if scope is None:  # a class: the globals of its methods
        method = next((v for v in vars(obj).values()
                       if isinstance(v, types.FunctionType)), None)
        scope = method.__globals__ if method else {}
    return {"name": found[1], "source": found[2],
            "globals": _globals(side, found[2], scope)}


def decode_mirror(side, value, remote):
    """The hand-in's side: a local copy to trace, whose real calls go back."""
    if value["kind"] == "closure":
        return _decode_closure(side, value, remote)
    local = _local(side, value)
    if value["kind"] == "function":
        if not isinstance(local, types.FunctionType):
            raise CodeError(f"{value['name']} is not a function")
        return _mirror_function(local, remote)
    if not (isinstance(local, type) and issubclass(local, torch.nn.Module)):
        raise CodeError(f"{value['name']} is not a module class")
    cls = _mirror_class(side, local)
    m = cls.__new__(cls)
    torch.nn.Module.__init__(m)
    for key, v in side.decode(value["state"]).items():
        m.__dict__[str(key)] = v
    m.__dict__["_wire_remote"] = remote
    return m


def _local(side, value):
    name = str(value["name"])
    if not _IDENT.match(name):
        raise CodeError(f"a name {name!r}")
    if value["source"] is None:
        if name not in side.named:
            raise CodeError(f"no hand-out name {name!r}")
        return side.named[name]
    source = str(value["source"])
    values = {str(k): side.decode(v) for k, v in value["globals"].items()}
    if source not in side.code_cache:  # one class per test code: type(a) is type(b)
        digest = hashlib.sha256(source.encode()).hexdigest()[:12]
        filename = f"<test code {digest}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True),
                                     filename)
        scope = dict(side.scope)
        exec(compile(source, filename, "exec"), scope)
        side.code_cache[source] = (scope[name], scope)
    obj, scope = side.code_cache[source]
    scope.update(values)  # this call's values (a loop bound drawn anew)
    return obj


def _plain(args, kwargs) -> bool:
    """True for a call on real values: it runs the tests' own object."""
    tracing = getattr(fx._symbolic_trace, "is_fx_symbolic_tracing",
                      fx._symbolic_trace.is_fx_tracing)
    if tracing() or torch.compiler.is_compiling():
        return False
    leaves = pytree.tree_leaves((args, kwargs))
    return all(type(v) is torch.Tensor or type(v) in _SCALARS for v in leaves)


def _mirror_function(local, remote):
    @functools.wraps(local)   # fx reads the signature through __wrapped__
    def mirror(*args, **kwargs):
        if _plain(args, kwargs):
            return remote(*args, **kwargs)
        return local(*args, **kwargs)
    mirror._wire_back = remote
    return mirror


def _mirror_call(self, *args, **kwargs):
    if _plain(args, kwargs):
        return self.__dict__["_wire_remote"](*args, **kwargs)
    return torch.nn.Module.__call__(self, *args, **kwargs)


def _mirror_class(side, cls):
    if cls not in side.mirror_classes:
        side.mirror_classes[cls] = type(cls.__name__, (cls,), {
            "__call__": _mirror_call, "__module__": cls.__module__,
            "__qualname__": cls.__qualname__})
    return side.mirror_classes[cls]


def back_of(obj):
    """The tests' handle a mirror stands for, or None."""
    if isinstance(obj, torch.nn.Module):
        return obj.__dict__.get("_wire_remote")
    return getattr(obj, "_wire_back", None) if isinstance(
        obj, types.FunctionType) else None
