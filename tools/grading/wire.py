"""The wire between the hand-in's process and the tests' process: values as data.

The tests never hold an object the hand-in made, only a copy rebuilt from data:
None, numbers, strings, tuples, lists, dicts, sets, tensors, dtypes, torch.nn
modules (their state, never their code) and fx GraphModules (their graph, rebuilt by
fx from an allowlist of functions: aten ops, operator, math, torch, F, and the
hand-out's own functions by name). Anything else stays where it was made and
crosses as a handle: calling a handle asks the other process to run it there.
A message is torch.save of a tree of plain containers and tensors, read back with
torch.load(weights_only=True): no pickled code ever reaches the tests.
This file is mounted into both sandboxes; it imports nothing of the grader.
"""

import collections
import enum
import importlib
import io
import os
import re
import struct
import types

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
import wire_code
from torch.fx.immutable_collections import immutable_dict as _IDICT  # noqa: E402
from torch.fx.immutable_collections import immutable_list as _ILIST  # noqa: E402

MAX_MESSAGE = 512 << 20   # bytes; a larger message is refused
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOTTED = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$")
# functions a rebuilt graph may call, by module; public names only
_MODULES = ("torch", "torch.nn.functional", "torch._C._nn", "torch.functional",
            "torch._C._VariableFunctions", "torch.special", "torch.linalg",
            "operator", "_operator", "math")
_DENY = {"load", "save", "compile", "attrgetter", "itemgetter", "methodcaller",
         "call", "set_default_dtype", "set_default_device", "set_default_tensor_type",
         "set_printoptions", "use_deterministic_algorithms", "manual_seed", "seed",
         "set_rng_state", "from_file", "set_num_threads", "export", "jit", "hub"}
_DUNDERS = {f"__{n}__" for n in (
    "add", "sub", "mul", "truediv", "floordiv", "matmul", "mod", "pow", "neg", "pos",
    "radd", "rsub", "rmul", "rtruediv", "rmatmul", "getitem", "and", "or", "xor",
    "invert", "lt", "le", "gt", "ge", "eq", "ne", "abs", "len", "iadd", "imul")}
_MODULE_CLASSES = ("torch.nn.modules.", "graphopt.")


class GraderNote(Exception):
    """A failure the grader itself words (no test data in it): shown for hidden
    cases too."""


class WireError(GraderNote):
    """A value that cannot cross, or a message that breaks the rules."""


class Stale(GraderNote, RuntimeError):
    """A module whose code is older than its graph (no recompile())."""


class Mutated(GraderNote, AssertionError):
    """A call changed the objects the tests gave it."""


# ---------------------------------------------------------------- framing

def pack(message) -> bytes:
    """One message as bytes: raises (nothing sent) when a value cannot be saved."""
    buffer = io.BytesIO()
    torch.save(message, buffer)
    data = buffer.getvalue()
    return struct.pack(">Q", len(data)) + data


def send(fd: int, message) -> None:
    write(fd, pack(message))


def write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read(fd: int, n: int) -> bytes:
    parts, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other process closed the wire")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def receive(fd: int):
    (size,) = struct.unpack(">Q", _read(fd, 8))
    if size > MAX_MESSAGE:
        raise WireError(f"a message of {size} bytes (the limit is {MAX_MESSAGE})")
    return torch.load(io.BytesIO(_read(fd, size)), weights_only=True)


# ---------------------------------------------------------------- encoding

class Side:
    """One end: its own objects behind handles, and its names the other side knows."""

    def __init__(self, named: dict, trusting: bool):
        self.named = named          # name -> object: the hand-out's functions, classes
        self.trusting = trusting    # the hand-in's side rebuilds any named class
        self.handles: list = []
        self.remote = None          # a callable(kind, id, *rest) set by the caller
        self.scope: dict = {}       # the hand-in's side: where the tests' code runs
        self.sources: dict = {}     # the tests' side: id -> its test code
        self.graphs: list = []      # the tests' side: graphs whose nodes it sent
        self.graph_versions: dict = {}
        self.copies: dict = {}      # the hand-in's side: gid -> its copy of a graph
        self.code_cache: dict = {}
        self.mirror_classes: dict = {}

    def handle(self, obj) -> dict:
        kind = type(obj).__name__
        for i, known in enumerate(self.handles):
            if known is obj:
                return {"$": "handle", "id": i, "type": kind}
        self.handles.append(obj)
        return {"$": "handle", "id": len(self.handles) - 1, "type": kind}

    def encode(self, value):
        if value is None or type(value) in (bool, int, float, str):
            return value
        if type(value).__module__ == "numpy" and hasattr(value, "dtype") \
                and getattr(value, "shape", None) == ():  # a numpy scalar
            return {"$": "numpy", "dtype": str(value.dtype), "value": value.item()}
        if isinstance(value, torch.Tensor):
            return _tensor(value)
        if isinstance(value, (torch.dtype, torch.device, torch.memory_format,
                              torch.layout)):
            return {"$": "torch", "name": str(value).removeprefix("torch.")}
        if isinstance(value, torch.Size):
            return {"$": "size", "items": list(value)}
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return {"$": "tuple", "items": [self.encode(v) for v in value]}
        if type(value) in (list, _ILIST):
            return [self.encode(v) for v in value]
        if type(value) in (dict, collections.OrderedDict, _IDICT):
            tag = "odict" if type(value) is collections.OrderedDict else "dict"
            return {"$": tag, "items": [[self.encode(k), self.encode(v)]
                                        for k, v in value.items()]}
        if type(value) in (set, frozenset):
            return {"$": "set", "items": [self.encode(v) for v in value]}
        if isinstance(value, slice):
            return {"$": "slice", "items": [self.encode(v) for v in
                                            (value.start, value.stop, value.step)]}
        if value is Ellipsis:
            return {"$": "ellipsis"}
        if type(value) is types.SimpleNamespace:
            return {"$": "namespace", "items": self.encode(vars(value))}
        if isinstance(value, complex):
            return {"$": "complex", "items": [value.real, value.imag]}
        if isinstance(value, fx.GraphModule):
            found = self._graph_module(value)
            if not self.trusting and not _packs(found):  # the tests' compiled
                return self.handle(value)                # stages: called there
            return found
        special = self._special(value)
        if special is not None:
            return special
        if isinstance(value, _NoGuard):
            return {"$": "shapeguard", "expected": value.expected,
                    "key": self.encode(value.key)}
        if isinstance(value, torch.nn.Module) and _module_class_ok(type(value)):
            return self._module(value)
        return self._callable(value) if callable(value) else self.handle(value)

    def _special(self, value):
        """Nodes, enums, mirrors, and the other side's objects going home."""
        if isinstance(value, Remote) and value._side is self:
            return {"$": "back", "id": value._id}
        if isinstance(value, enum.Enum):
            return wire_code.encode_enum(value)
        if self.trusting:  # the hand-in's side: only what the tests sent goes back
            remote = wire_code.back_of(value)
            if isinstance(remote, Remote) and remote._side is self:
                return {"$": "back", "id": remote._id}
            if isinstance(value, fx.Node):
                return wire_code.encode_node_back(self, value)
            return None
        if isinstance(value, fx.Node):
            return wire_code.encode_node(self, value)
        return wire_code.encode_mirror(self, value)

    def _callable(self, fn):
        name = getattr(fn, "__name__", None)
        if isinstance(name, str) and self.named.get(name) is fn:
            return {"$": "named", "name": name}
        if isinstance(fn, torch._ops.OpOverload):
            return {"$": "op", "name": str(fn)}
        if isinstance(fn, torch._ops.OpOverloadPacket):
            return {"$": "op", "name": str(fn)}
        if isinstance(fn, torch._ops.HigherOrderOperator) and _IDENT.match(fn.name()):
            return {"$": "op", "name": f"higher_order.{fn.name()}"}
        found = _public_function(fn)
        return {"$": "fn", "module": found[0], "name": found[1]} if found \
            else self.handle(fn)

    def _module(self, m):
        if type(m).__name__ == "ShapeGuard":  # export's shape check, by its shapes
            key = getattr(m, "key", None)
            return {"$": "shapeguard", "expected": str(getattr(m, "expected", "")),
                    "key": self.encode(key) if isinstance(key, list) else None}
        state = self.encode({k: v for k, v in vars(m).items()
                             if not k.startswith("_compiled")})
        if not _plain_tree(state) or not _packs(state):  # compiled code, weak
            return self.handle(m)                      # references: not data
        cls = type(m)
        return {"$": "module", "class": f"{cls.__module__}.{cls.__qualname__}",
                "state": state}

    def _graph_module(self, gm):
        nodes = []
        for n in gm.graph.nodes:
            target = n.target if isinstance(n.target, str) else self._callable(n.target)
            meta = {k: _meta(n.meta[k]) for k in ("tensor_meta", "val")
                    if k in n.meta and _meta(n.meta[k]) is not None}
            nodes.append({"op": n.op, "name": n.name, "target": target,
                          "args": self.encode(_refs(n.args)),
                          "kwargs": self.encode(_refs(n.kwargs)), "meta": meta})
        info = getattr(gm.graph._codegen, "pytree_info", None)
        tree = None if info is None else {
            "orig_args": list(info.orig_args),
            "in_spec": None if info.in_spec is None
            else pytree.treespec_dumps(info.in_spec),
            "out_spec": None if info.out_spec is None
            else pytree.treespec_dumps(info.out_spec)}
        try:
            stale = gm.code != gm.graph.python_code("self").src
        except Exception:  # a graph fx cannot print: it cannot run either
            stale = True
        attrs = {}
        for n in gm.graph.nodes:  # plain tensors a get_attr reads (not buffers)
            if n.op == "get_attr" and isinstance(n.target, str):
                owner, _, leaf = n.target.rpartition(".")
                try:
                    holder = gm.get_submodule(owner) if owner else gm
                except AttributeError:
                    continue
                if leaf not in holder._parameters and leaf not in holder._buffers \
                        and leaf not in holder._modules and hasattr(holder, leaf):
                    attrs[n.target] = self.encode(getattr(holder, leaf))
        return {"$": "gm", "nodes": nodes, "pytree": tree, "stale": stale,
                "training": gm.training, "attrs": attrs,
                "parameters": self.encode(dict(gm._parameters)),
                "buffers": self.encode(dict(gm._buffers)),
                "transient": sorted(gm._non_persistent_buffers_set),
                "modules": self.encode(dict(gm._modules)),
                "meta": {k: self.encode(v) for k, v in getattr(gm, "meta", {}).items()
                         if isinstance(v, (bool, int, float, str))}}

    # ------------------------------------------------------------ decoding

    def decode(self, value):
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
                if type(value) is not torch.nn.Parameter:
                    raise WireError(f"a tensor of class {type(value).__name__}")
            return value
        tag = value.get("$")
        items = value.get("items")
        if tag == "tuple":
            return tuple(self.decode(v) for v in items)
        if tag in ("dict", "odict"):
            out = {} if tag == "dict" else collections.OrderedDict()
            for k, v in items:
                out[self.decode(k)] = self.decode(v)
            return out
        if tag == "set":
            return {self.decode(v) for v in items}
        if tag == "size":
            return torch.Size(int(v) for v in items)
        if tag == "slice":
            return slice(*(self.decode(v) for v in items))
        if tag == "ellipsis":
            return Ellipsis
        if tag == "namespace":
            fields = self.decode(items)
            if not all(isinstance(k, str) and _IDENT.match(k) for k in fields):
                raise WireError("a namespace with a field that is no name")
            return types.SimpleNamespace(**fields)
        if tag == "complex":
            return complex(float(items[0]), float(items[1]))
        if tag == "tensor":
            return _untensor(value)
        if tag == "numpy":
            import numpy
            if not _IDENT.match(str(value["dtype"])):
                raise WireError("a numpy scalar of no known type")
            return numpy.dtype(str(value["dtype"])).type(value["value"])
        if tag == "torch":
            return _torch_constant(value["name"])
        if tag == "named":
            if value["name"] not in self.named:
                raise WireError(f"no hand-out name {value['name']!r}")
            return self.named[value["name"]]
        if tag == "op":
            return _op(value["name"])
        if tag == "fn":
            return _function(value["module"], value["name"])
        if tag == "handle":
            return _remote_class(str(value.get("type", "")))(self, int(value["id"]))
        if tag == "shapeguard":
            key = value.get("key")
            return _NoGuard(str(value.get("expected", "")),
                            None if key is None else self.decode(key))
        if tag == "back":  # one of this side's own objects, never another's
            return self.handles[int(value["id"])]
        if tag == "enum":
            return _code(wire_code.decode_enum, value)
        if tag == "node_back" and not self.trusting:
            return _code(wire_code.decode_node_back, self, value)
        if tag == "node" and self.trusting:
            return _code(wire_code.decode_node, self, value)
        if tag == "mirror" and self.trusting:
            remote = _remote_class(str(value["name"]))(self, int(value["id"]))
            return _code(wire_code.decode_mirror, self, value, remote)
        if tag == "module":
            return self._unmodule(value)
        if tag == "gm":
            return self._ungraph(value)
        raise WireError(f"unknown value tag {tag!r}")

    def _unmodule(self, value):
        cls = _module_class(value["class"], self.named if self.trusting else {})
        if cls is None:
            raise WireError(f"a module of class {value['class']} cannot cross: only "
                            "torch.nn and graphopt modules do")
        m = cls.__new__(cls)
        torch.nn.Module.__init__(m)
        for key, v in self.decode(value["state"]).items():
            if not isinstance(key, str):
                raise WireError("a module attribute without a name")
            m.__dict__[key] = v
        return m

    def _ungraph(self, value):
        graph, env = fx.Graph(), {}
        tree = value.get("pytree")
        if tree:
            graph._codegen = fx.graph._PyTreeCodeGen(fx.graph._PyTreeInfo(
                [str(a) for a in tree["orig_args"]],
                tree["in_spec"] and pytree.treespec_loads(tree["in_spec"]),
                tree["out_spec"] and pytree.treespec_loads(tree["out_spec"])))

        def ref(v):
            if isinstance(v, dict) and v.get("$") == "node":
                return env[v["name"]]
            return v

        for n in value["nodes"]:
            op, target = n["op"], n["target"]
            target = _check_target(op, target if isinstance(target, str)
                                   else self.decode(target))
            args = _deref(self.decode(n["args"]), ref)
            kwargs = _deref(self.decode(n["kwargs"]), ref)
            _check_args(op, target, args, kwargs)
            node = graph.create_node(op, target, tuple(args), dict(kwargs),
                                     name=str(n["name"]))
            node.meta.update({k: _unmeta(v) for k, v in n["meta"].items()})
            env[n["name"]] = node
        root = torch.nn.Module()
        root.training = bool(value["training"])
        for name, p in self.decode(value["parameters"]).items():
            root._parameters[name] = p
        for name, b in self.decode(value["buffers"]).items():
            root._buffers[name] = b
        root._non_persistent_buffers_set = set(value["transient"])
        for name, m in self.decode(value["modules"]).items():
            root._modules[name] = m
        for target, v in value["attrs"].items():
            _set_dotted(root, target, self.decode(v))
        gm = fx.GraphModule(root, graph)
        for key in ("_parameters", "_buffers", "_modules"):
            getattr(gm, key).update({k: v for k, v in getattr(root, key).items()
                                     if k not in getattr(gm, key)})
        gm.meta.update(value.get("meta", {}))
        if value["stale"]:
            _mark_stale(gm)
        return gm


def _plain_tree(value) -> bool:
    """True when torch.save(weights_only) can carry `value` as it is."""
    if isinstance(value, dict):
        return all(_plain_tree(k) and _plain_tree(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain_tree(v) for v in value)
    return value is None or type(value) in (bool, int, float, str, torch.Tensor,
                                            torch.nn.Parameter)


def _packs(value) -> bool:
    try:
        pack(value)
        return True
    except Exception:  # torch.save refuses something inside
        return False


def _code(fn, *args):
    try:
        return fn(*args)
    except wire_code.CodeError as e:
        raise WireError(str(e)) from None


def _refs(value):
    """Node references as data."""
    return fx.node.map_arg(value, lambda n: {"$": "node", "name": n.name})


def _deref(value, ref):
    if isinstance(value, dict) and value.get("$") == "node":
        return ref(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_deref(v, ref) for v in value)
    if isinstance(value, dict):
        return {k: _deref(v, ref) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(*(_deref(v, ref) for v in (value.start, value.stop, value.step)))
    return value


def _tensor(t):
    data = t.detach()
    if type(data) is not torch.Tensor:  # a fake or functional tensor: its shape only
        raise WireError(f"a tensor of class {type(t).__name__} cannot cross")
    return {"$": "tensor", "data": data, "grad": bool(t.requires_grad),
            "param": isinstance(t, torch.nn.Parameter)}


def _untensor(value):
    data = value["data"]
    if type(data) is not torch.Tensor:
        raise WireError("a tensor value that is not a tensor")
    if value.get("param"):
        return torch.nn.Parameter(data, requires_grad=bool(value["grad"]))
    return data.requires_grad_(bool(value["grad"])) if data.is_floating_point() \
        or data.is_complex() else data


def _meta(v):
    if isinstance(v, torch.Tensor):
        return {"$": "meta", "shape": list(v.shape), "dtype": str(v.dtype)[6:]}
    if type(v).__name__ == "TensorMetadata":
        return {"$": "tmeta", "shape": list(v.shape), "dtype": str(v.dtype)[6:],
                "stride": list(v.stride), "requires_grad": bool(v.requires_grad)}
    return None


def _unmeta(v):
    dtype = _torch_constant(v["dtype"])
    shape = [int(s) for s in v["shape"]]
    if v["$"] == "meta":
        return torch.empty(shape, dtype=dtype, device="meta")
    from torch.fx.passes.shape_prop import TensorMetadata
    return TensorMetadata(torch.Size(shape), dtype, bool(v["requires_grad"]),
                          tuple(int(s) for s in v["stride"]), torch.contiguous_format,
                          False, {})


def _torch_constant(name: str):
    value = getattr(torch, str(name), None) if _IDENT.match(str(name)) else None
    if not isinstance(value, (torch.dtype, torch.memory_format, torch.layout)):
        try:
            return torch.device(str(name))
        except (RuntimeError, TypeError):
            raise WireError(f"not a torch constant: {name!r}") from None
    return value


def _public_function(fn):
    """(module, name) of an allowlisted function that is `fn`, or None."""
    if fn is getattr:
        return ("builtins", "getattr")
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or name.startswith("_") or name in _DENY:
        return None
    for module in _MODULES:
        mod = _module(module)
        if getattr(mod, name, None) is fn:
            return module, name
    return None


def _function(module: str, name: str):
    if module == "builtins" and name == "getattr":
        return getattr
    if module not in _MODULES or not _IDENT.match(name) or name.startswith("_") \
            or name in _DENY:
        raise WireError(f"{module}.{name} is not a function a graph may call here")
    fn = getattr(_module(module), name, None)
    if fn is None or isinstance(fn, type) or not callable(fn):
        raise WireError(f"{module}.{name} is not a function")
    return fn


def _module(dotted: str):
    """An allowlisted module, or namespace such as torch._C._nn (not importable)."""
    top, *rest = dotted.split(".")
    obj = importlib.import_module(top)
    for part in rest:
        obj = getattr(obj, part)
    return obj


def _op(name: str):
    namespace, _, rest = str(name).partition(".")
    parts = rest.split(".")
    if namespace not in ("aten", "prims", "higher_order") or not 1 <= len(parts) <= 2 \
            or not all(_IDENT.match(p) for p in parts):
        raise WireError(f"not an aten operator: {name!r}")
    op = getattr(getattr(torch.ops, namespace), parts[0])
    return getattr(op, parts[1]) if len(parts) == 2 else op


def _check_target(op, target):
    if op in ("placeholder", "output"):
        if not isinstance(target, str) or not _IDENT.match(target):
            raise WireError(f"a {op} node named {target!r}")
    elif op in ("get_attr", "call_module"):
        if not isinstance(target, str) or not _DOTTED.match(target):
            raise WireError(f"a {op} target {target!r}")
    elif op == "call_method":
        if not isinstance(target, str) or not _IDENT.match(target) or (
                target.startswith("_") and target not in _DUNDERS) \
                or target.startswith("format"):
            raise WireError(f"a method {target!r} a graph may not call here")
    elif op != "call_function" or not callable(target):
        raise WireError(f"a node of kind {op!r}")
    return target


def _check_args(op, target, args, kwargs):
    strings = []
    _strings((args, kwargs), strings)
    if any("__" in s for s in strings):
        raise WireError("a graph constant with '__' (a way to private attributes)")
    if target is getattr and not (len(args) == 2 and isinstance(args[1], str)
                                  and not args[1].startswith("_")):
        raise WireError("getattr of a private or computed name")


def _strings(value, out):
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, (list, tuple, set)):
        for v in value:
            _strings(v, out)
    elif isinstance(value, dict):
        for k, v in value.items():
            _strings(k, out)
            _strings(v, out)


def _set_dotted(root, target, value):
    *path, leaf = target.split(".")
    holder = root
    for part in path:
        if part not in holder._modules:
            holder._modules[part] = torch.nn.Module()
        holder = holder._modules[part]
    setattr(holder, leaf, value)


def _module_class_ok(cls) -> bool:
    return cls.__module__.startswith(_MODULE_CLASSES) or cls is torch.nn.Module


def _module_class(path: str, named: dict):
    module, _, name = str(path).rpartition(".")
    if module == "__main__" and isinstance(named.get(name), type):
        return named[name]
    if not (module.startswith(_MODULE_CLASSES)
            or path == "torch.nn.modules.module.Module"):
        return None
    if not all(_IDENT.match(p) for p in path.split(".")):
        return None
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    ok = isinstance(cls, type) and issubclass(cls, torch.nn.Module)
    return cls if ok and not issubclass(cls, fx.GraphModule) else None


class _NoGuard(torch.nn.Module):
    """Stands for export's shape check in a copied graph: it refuses the inputs
    whose shapes or values differ from the examples' (graphopt's ShapeGuard lets
    exactly those through without asking export's guards), with its error."""

    def __init__(self, expected: str = "", key=None):
        super().__init__()
        self.expected, self.key = expected, key

    def forward(self, *args, **kwargs):
        if self.key is None or kwargs:
            return None
        got = [a.shape if isinstance(a, torch.Tensor) else a for a in args]
        if len(got) == len(self.key) and all(
                _same(a, b) for a, b in zip(got, self.key)):
            return None
        from graphopt.errors import ShapeError
        raise ShapeError(
            f"this graph was captured for inputs of shape {self.expected} and cannot "
            "run on these: capture or optimize the model again with an example of "
            "the new shape, e.g. graphopt.optimize(model, x_new)")


def _same(a, b) -> bool:
    if isinstance(a, torch.Size) or isinstance(b, torch.Size):
        return tuple(a) == tuple(b) if isinstance(a, (tuple, list)) and isinstance(
            b, (tuple, list)) else False
    return type(a) is type(b) and a == b


def _mark_stale(gm):
    """The hand-in's module ran code older than its graph (no recompile()): so does
    the copy, with the reason."""
    def forward(self, *args, **kwargs):
        raise Stale("the graph changed but the module's code did not: call "
                    "gm.recompile() after editing gm.graph")
    gm._code = "# not recompiled after the graph changed\n" + gm._code
    type(gm).forward = forward


def _remote_class(name: str):
    """A Remote subclass named as the object's class, for the tests' messages
    ("must return a GraphModule, not _Anything")."""
    name = name if _IDENT.match(name) and len(name) <= 60 else "Remote"
    return type(name, (Remote,), {})


class Remote:
    """An object of the other process: calling it, or reading an attribute, asks
    that process, which answers with a value (or another handle)."""

    def __init__(self, side: Side, ident: int):
        self.__dict__.update(_side=side, _id=ident, __name__=f"handin_{ident}",
                             __qualname__=f"handin_{ident}")

    def __call__(self, *args, **kwargs):
        return self._side.remote("call", self._id, args, kwargs)

    def __getattr__(self, name):
        # private names never cross (the other side refuses them): answer here, as
        # getattr(obj, "_x", default) expects (torch 2.14's fx codegen asks so)
        if name.startswith("_"):
            raise AttributeError(name)
        return self._side.remote("getattr", self._id, name)

    def __repr__(self):
        return f"<an object of the other process ({self._id})>"

    def __deepcopy__(self, memo):  # a copy of a reference to the other process's
        return self                # object refers to it too

    def __copy__(self):
        return self


class HandinError(Exception):
    """An exception raised by the hand-in's code, in its own process."""

    def __init__(self, kind: str, where: str, text: str):
        super().__init__(f"{kind}{where}: {text}" if text else f"{kind}{where}")
        self.kind, self.where, self.text = kind, where, text


class Conn:
    """One process's end of the wire: requests to the other side, and answers to
    the other side's requests that arrive while it waits."""

    def __init__(self, side: Side, rfd: int, wfd: int, on_other=None):
        self.side, self.rfd, self.wfd = side, rfd, wfd
        self.on_other = on_other   # a message that is no request nor reply
        self.used: set = set()     # what the other side reported using (spies)
        self.broken = ""           # why the wire cannot be trusted any more
        self.after = None          # the arguments of the last call, as it left them
        side.remote = self.request

    def _receive(self):
        try:
            return receive(self.rfd)
        except Exception as e:  # EOF, garbage, a message too large: no resync
            self.broken = self.broken or f"{type(e).__name__}: {e}"[:200]
            raise WireError(f"the wire to the other process broke ({e})"[:300]) \
                from None

    def request(self, kind, ident, *rest):
        send(self.wfd, {"op": kind, "id": ident, "rest": self.side.encode(list(rest))})
        value = self.wait()
        if self.after is not None and kind == "call":
            what = changed(list(rest), self.after)
            if what:
                raise Mutated(
                    f"your function changed {what} it was given: leave the caller's "
                    "objects as they were (work on a copy, copy.deepcopy)")
        return value

    def wait(self):
        while True:
            msg = self._receive()
            op = msg.get("op") if isinstance(msg, dict) else None
            if op in ("call", "getattr"):
                self.answer(msg)
            elif op == "result":
                self.used.update(str(u) for u in msg.get("used", ()))
                self.after = self.side.decode(msg["args"]) if "args" in msg else None
                return self.side.decode(msg["value"])
            elif op == "error":
                self.used.update(str(u) for u in msg.get("used", ()))
                raise _error_class(str(msg["kind"]))(
                    str(msg["kind"]), str(msg["where"]), str(msg["text"]))
            elif self.on_other is not None:
                result = self.on_other(msg)
                if result is not None:
                    return result
            else:
                raise WireError(f"an unexpected message {op!r}")

    def answer(self, msg, used=()):
        try:
            obj = self.side.handles[int(msg["id"])]
            rest = self.side.decode(msg["rest"])
            if msg["op"] == "call":
                value = obj(*rest[0], **rest[1])
            elif not self.side.trusting and str(rest[0]).startswith("_"):
                raise AttributeError(f"{rest[0]} is private to the tests")
            else:
                value = getattr(obj, str(rest[0]))
            reply = {"op": "result", "value": self.side.encode(value)}
            if msg["op"] == "call" and self.side.trusting:  # the hand-in's side
                try:  # what the call did to its arguments, for the tests to see
                    reply["args"] = self.side.encode(rest)
                except WireError:
                    pass
            reply["used"] = sorted(used() if callable(used) else used)
            data = pack(reply)  # a value torch.save refuses is an error reply
        except BaseException as e:  # SystemExit too: it is the hand-in's answer
            kind, where, text = describe(e)
            data = pack({"op": "error", "kind": kind, "where": where, "text": text,
                         "used": sorted(used() if callable(used) else used)})
        write(self.wfd, data)


def _error_class(kind: str):
    """HandinError, also an instance of the builtin exception it stands for, so a
    test's `except AttributeError` still catches the hand-in's AttributeError."""
    import builtins
    base = getattr(builtins, kind, None) if _IDENT.match(kind) else None
    if not (isinstance(base, type) and issubclass(base, Exception)) \
            or issubclass(base, (KeyError, UnicodeError, OSError)):
        return HandinError  # their own str() or arguments: a plain HandinError
    try:
        cls = type(kind, (HandinError, base), {})
        cls("x", "", "")
        return cls
    except TypeError:
        return HandinError


def changed(before, after, where="") -> str:
    """'' when `after` (the hand-in's copies after a call) equals `before`, else
    what changed: the tests' own objects never change, so they check here."""
    if isinstance(before, torch.Tensor):
        same = isinstance(after, torch.Tensor) and before.shape == after.shape \
            and before.dtype == after.dtype and bool(torch.equal(
                torch.nan_to_num(before.detach()), torch.nan_to_num(after.detach())))
        return "" if same else f"the tensor{where}"
    if isinstance(before, fx.GraphModule):
        if not isinstance(after, fx.GraphModule) or [
                n.format_node() for n in before.graph.nodes] != [
                n.format_node() for n in after.graph.nodes]:
            return f"the graph{where}"
    if isinstance(before, torch.nn.Module):
        a, b = before.state_dict(), getattr(after, "state_dict", dict)()
        if set(a) != set(b):
            return f"the module{where}"
        return next((changed(a[k], b[k], f" {k} of the module{where}") for k in a
                     if changed(a[k], b[k])), "")
    if isinstance(before, (list, tuple)) and isinstance(after, (list, tuple)) \
            and len(before) == len(after):
        return next((changed(x, y, where) for x, y in zip(before, after)
                     if changed(x, y, where)), "")
    if isinstance(before, dict) and isinstance(after, dict):
        return next((changed(v, after[k], where) for k, v in before.items()
                     if k in after and changed(v, after[k], where)), "")
    return ""


def describe(e: BaseException) -> tuple[str, str, str]:
    """(type, ' (cell 6 line 3)', message) of an exception from a notebook cell."""
    import traceback
    if isinstance(e, SystemExit):
        return "SystemExit", "", "exit() called" + (f" ({e})" if str(e) else "")
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if f.filename.startswith("<cell")]
    where = f" ({frames[-1].filename[1:-1]} line {frames[-1].lineno})" if frames else ""
    return type(e).__name__, where, " ".join(str(e).split())[:300]
