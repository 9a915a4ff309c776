"""GraphModules as data, and the functions a rebuilt graph may call (wire.py)."""

import importlib
import re

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from wire import _IDENT, Stale, WireError

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


def encode_graph(side, gm):
    """A GraphModule as data: its nodes, targets by name, its tensors."""
    nodes = []
    for n in gm.graph.nodes:
        target = n.target if isinstance(n.target, str) else side._callable(n.target)
        meta = {k: _meta(n.meta[k]) for k in ("tensor_meta", "val")
                if k in n.meta and _meta(n.meta[k]) is not None}
        nodes.append({"op": n.op, "name": n.name, "target": target,
                      "args": side.encode(_refs(n.args)),
                      "kwargs": side.encode(_refs(n.kwargs)), "meta": meta})
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
                attrs[n.target] = side.encode(getattr(holder, leaf))
    return {"$": "gm", "nodes": nodes, "pytree": tree, "stale": stale,
            "training": gm.training, "attrs": attrs,
            "parameters": side.encode(dict(gm._parameters)),
            "buffers": side.encode(dict(gm._buffers)),
            "transient": sorted(gm._non_persistent_buffers_set),
            "modules": side.encode(dict(gm._modules)),
            "meta": {k: side.encode(v) for k, v in getattr(gm, "meta", {}).items()
                     if isinstance(v, (bool, int, float, str))}}

# ------------------------------------------------------------ decoding


def decode_graph(side, value):
    """A GraphModule rebuilt by fx from data; every target allowlisted."""
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
                               else side.decode(target))
        args = _deref(side.decode(n["args"]), ref)
        kwargs = _deref(side.decode(n["kwargs"]), ref)
        _check_args(op, target, args, kwargs)
        node = graph.create_node(op, target, tuple(args), dict(kwargs),
                                 name=str(n["name"]))
        node.meta.update({k: _unmeta(v) for k, v in n["meta"].items()})
        env[n["name"]] = node
    root = torch.nn.Module()
    root.training = bool(value["training"])
    for name, p in side.decode(value["parameters"]).items():
        root._parameters[name] = p
    for name, b in side.decode(value["buffers"]).items():
        root._buffers[name] = b
    root._non_persistent_buffers_set = set(value["transient"])
    for name, m in side.decode(value["modules"]).items():
        root._modules[name] = m
    for target, v in value["attrs"].items():
        _set_dotted(root, target, side.decode(v))
    gm = fx.GraphModule(root, graph)
    for key in ("_parameters", "_buffers", "_modules"):
        getattr(gm, key).update({k: v for k, v in getattr(root, key).items()
                                 if k not in getattr(gm, key)})
    gm.meta.update(value.get("meta", {}))
    if value["stale"]:
        _mark_stale(gm)
    return gm


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
