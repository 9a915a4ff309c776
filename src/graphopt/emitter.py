"""One emitter for straight-line code: a graph written as one Python function (ch. 4).

fx runs a GraphModule through the code it generates (`gm.code`): one line per node,
each value dropped after its last use. graphopt writes two functions of its own the
same way, with less between each op and its kernel: a fused group's own ops
(`eager_ops`, chapters 4 and 6) and the wrapper's fast path
(`backend.straight_line`, chapter 7). Both are an `Emitter`:

- one statement per node, in the graph's order (`statement`; None leaves a node
  out: a placeholder, a weight read inline);
- after it, `del` of every value it read for the last time (`last_uses`) and of its
  own value when nothing reads it, as fx's code does, so the peak memory is fx's;
  `frees` says which values a caller keeps (the inputs it was handed);
- every object the code calls or reads that is not a literal (an op's C++ entry, a
  constant tensor, a module's plan) a global of the function, one name per object
  (`global_`).

A subclass says what a node's statement is, how a value is named (`name`) and how
the function returns (`output`). `Unsupported` from any of them: the caller keeps
fx's forward.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any, Callable

from torch.fx import Graph, Node

from .torch_internals import OpOverload, op_entry

# Values written into the code as Python literals (repr); anything else is a global.
LITERALS = (int, float, bool, str, type(None))


class Unsupported(Exception):
    """A node or argument the emitter cannot write out (ch. 4)."""


def last_uses(graph: Graph) -> dict[Node, list[Node]]:
    """node -> the values it reads for the last time (fx's code frees them right
    after it; so does every `Emitter`) (ch. 4)."""
    seen, last = set(), {}
    for node in reversed(graph.nodes):
        for value in node.all_input_nodes:
            if value not in seen:
                seen.add(value)
                last.setdefault(node, []).append(value)
    return last


class Emitter:
    """Writes a graph as the body of one straight-line function (ch. 4)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.globals: dict[str, Any] = {}  # the function's globals, by name
        self.ids: dict[int, str] = {}
        self.reserved = {n.name for n in graph.nodes}  # names a global must not take

    # -- what a subclass says
    def statement(self, node: Node) -> str | None:
        """The line(s) computing `node`, or None to leave it out."""
        raise NotImplementedError

    def name(self, node: Node) -> str:
        """What the code calls `node`'s value (fx's node name by default)."""
        return node.name

    def frees(self, node: Node) -> bool:
        """Whether the code frees `node`'s value after its last use."""
        return True

    def output(self, node: Node) -> str:
        """What the function returns, for the graph's output node."""
        return self.arg(node.args[0])

    # -- what every emitter does the same way
    def body(self) -> list[str]:
        """Each node's statement, then the values it read last freed (ch. 4)."""
        last, lines = last_uses(self.graph), []
        for node in self.graph.nodes:
            if node.op == "output":
                lines.append(f"    return {self.output(node)}")
                break
            line = self.statement(node)
            if line is None:
                continue
            lines.append(line)
            dead = [self.name(d) for d in last.get(node, ()) if self.frees(d)]
            dead += [self.name(node)] if not node.users else []
            if dead:
                lines.append(f"    del {', '.join(dead)}")
        return lines

    def call(self, node: Node, callee: str, args: list[str]) -> str:
        """`name = callee(args)`, wrapped under 88 characters as a reader wants it."""
        line = f"    {self.name(node)} = {callee}({', '.join(args)})"
        if len(line) <= 88:
            return line
        body = textwrap.fill(", ".join(args), 80, initial_indent=" " * 8,
                             subsequent_indent=" " * 8, break_long_words=False,
                             break_on_hyphens=False)
        return f"    {self.name(node)} = {callee}(\n{body})"

    def op(self, target: OpOverload, hint: str) -> str:
        """An aten op's C++ entry (as fx's code calls it, one frame less) by name."""
        return self.global_(hint, op_entry(target))

    def arg(self, a: Any) -> str:
        """One argument as code: a value's name, a container written out, a literal,
        or else the object itself as a global (torch.Size, a dtype, a slice...)."""
        if isinstance(a, Node):
            return self.name(a)
        if isinstance(a, list):  # fx's immutable_list too
            return "[" + ", ".join(self.arg(x) for x in a) + "]"
        if isinstance(a, dict) and all(type(k) is str for k in a):
            return "{" + ", ".join(f"{k!r}: {self.arg(v)}" for k, v in a.items()) + "}"
        if type(a) is tuple or (isinstance(a, tuple) and holds_node(a)):
            inner = ", ".join(self.arg(x) for x in a)
            return f"({inner},)" if len(a) == 1 else f"({inner})"
        if type(a) in LITERALS and not (type(a) is float and not math.isfinite(a)):
            return repr(a)
        if isinstance(a, dict) and holds_node(a.values()):
            raise Unsupported("a dict with non-string keys holding graph values")
        return self.global_("c", a)

    def global_(self, hint: str, obj) -> str:
        """A global of the function for `obj`: one name per object, never clashing."""
        if id(obj) in self.ids:
            return self.ids[id(obj)]
        hint = hint if hint.isidentifier() else "g"
        name, k = hint, len(self.globals)
        while name in self.globals or name in self.reserved:
            name, k = f"{hint}_{k}", k + 1
        self.globals[name] = obj
        self.ids[id(obj)] = name
        return name

    def compile(self, source: str, filename: str, entry: str) -> Callable:
        """The function `entry` of `source`, its globals the emitter's (ch. 4)."""
        namespace = dict(self.globals)
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102
        return namespace[entry]


def holds_node(values) -> bool:
    """Whether a graph value hides in `values` (nested lists, tuples, dicts) (ch. 4)."""
    return any(isinstance(v, Node) or (isinstance(v, (list, tuple, dict)) and
                                       holds_node(v.values() if isinstance(v, dict)
                                                  else v)) for v in values)
