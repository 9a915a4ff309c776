"""fx nodes and enum members on the wire (wire.py; the tests' side sends them).

A node crosses with its graph, sent once per graph and version; the hand-in's
side keeps its copy and sends a node of it back by name, so the tests get their
own node again. An enum member crosses by class and name, graphopt's and torch's
only.
"""

import enum
import importlib
import re

import torch
import torch.fx as fx

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENUM_MODULES = ("graphopt.", "torch.")


class CodeError(Exception):
    """A value of these tags that breaks the rules (wire_side.py words it)."""


# ---------------------------------------------------------------- fx nodes

def encode_node(side, node):
    """The tests' side: a node of one of its graphs, with that graph when the other
    side has not seen this version of it."""
    graph = node.graph
    version = tuple(n.name for n in graph.nodes)
    gid = next((i for i, g in enumerate(side.graphs) if g is graph), None)
    if gid is None:
        side.graphs.append(graph)
        gid = len(side.graphs) - 1
    sent = side.graph_versions.get(gid) == version
    side.graph_versions[gid] = version
    gm = None
    if not sent:
        owner = graph.owning_module
        if not isinstance(owner, fx.GraphModule):
            owner = fx.GraphModule(torch.nn.Module(), graph)
        gm = side.encode(owner)
    return {"$": "node", "gid": gid, "name": node.name, "graph": gm}


def decode_node(side, value):
    """The hand-in's side: the node of that name in its copy of the graph."""
    gid = int(value["gid"])
    if value.get("graph") is not None:
        side.copies[gid] = side.decode(value["graph"])
    gm = side.copies.get(gid)
    if gm is None:
        raise CodeError("a node of a graph that was never sent")
    return _by_name(gm.graph, str(value["name"]))


def encode_node_back(side, node):
    """The hand-in's side: a node of a graph the tests sent comes back by name."""
    gid = next((i for i, gm in side.copies.items() if gm.graph is node.graph), None)
    return None if gid is None else {"$": "node_back", "gid": gid, "name": node.name}


def decode_node_back(side, value):
    gid = int(value["gid"])
    if not 0 <= gid < len(side.graphs):
        raise CodeError("a node of no graph the tests sent")
    return _by_name(side.graphs[gid], str(value["name"]))


def _by_name(graph, name):
    found = next((n for n in graph.nodes if n.name == name), None)
    if found is None:
        raise CodeError(f"no node {name!r} in the graph")
    return found


# ---------------------------------------------------------------- enums

def encode_enum(value):
    cls = type(value)
    if not cls.__module__.startswith(_ENUM_MODULES):
        return None
    return {"$": "enum", "class": f"{cls.__module__}.{cls.__qualname__}",
            "name": value.name}


def decode_enum(value):
    module, _, name = str(value["class"]).rpartition(".")
    if not module.startswith(_ENUM_MODULES) or not all(
            _IDENT.match(p) for p in str(value["class"]).split(".")):
        raise CodeError(f"an enum of class {value['class']!r}")
    cls = getattr(importlib.import_module(module), name, None)
    member = str(value["name"])
    if not (isinstance(cls, type) and issubclass(cls, enum.Enum)) \
            or member not in cls.__members__:
        raise CodeError(f"no enum member {value['class']}.{member}")
    return cls.__members__[member]
