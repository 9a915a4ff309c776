"""Side: what a value becomes on the wire, and what it is rebuilt as (wire.py)."""

import collections
import enum
import importlib
import types

import torch
import torch.fx as fx
import wire_code
import wire_graph
import wire_nodes
from torch.fx.immutable_collections import immutable_dict as _IDICT
from torch.fx.immutable_collections import immutable_list as _ILIST
from wire import _IDENT, Remote, WireError, _remote_class, pack
from wire_graph import _function, _NoGuard, _op, _public_function, _torch_constant

_MODULE_CLASSES = ("torch.nn.modules.", "graphopt.")


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
            return wire_nodes.encode_enum(value)
        if self.trusting:  # the hand-in's side: only what the tests sent goes back
            remote = wire_code.back_of(value)
            if isinstance(remote, Remote) and remote._side is self:
                return {"$": "back", "id": remote._id}
            if isinstance(value, fx.Node):
                return wire_nodes.encode_node_back(self, value)
            return None
        if isinstance(value, fx.Node):
            return wire_nodes.encode_node(self, value)
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
        return wire_graph.encode_graph(self, gm)

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
            return _code(wire_nodes.decode_enum, value)
        if tag == "node_back" and not self.trusting:
            return _code(wire_nodes.decode_node_back, self, value)
        if tag == "node" and self.trusting:
            return _code(wire_nodes.decode_node, self, value)
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
        return wire_graph.decode_graph(self, value)


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
    except wire_nodes.CodeError as e:
        raise WireError(str(e)) from None


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
