"""Data flow and data dependencies: which ops may run in parallel, and what one fused
kernel would have to move.

Introduced in chapter 1 ("Data flow" and "Data dependencies").

- `levels(gm)`: the topological levels (拓扑层级) of a graph. An op sits one level
  below the deepest op it depends on; ops on the same level share no data dependency
  (数据依赖), so a runtime may execute them in parallel.
- `draw_levels(gm)`: `graphopt.draw` with each level on one row.
- `accesses(gm)` and `fused_traffic(gm)`: the seed's way of counting memory traffic
  (one access per activation tensor read or written) and the bytes of the ideal fully
  fused kernel, which reads every graph input and weight once and writes each output
  once.
"""

from __future__ import annotations

from typing import NamedTuple

from torch.fx import GraphModule, Node

from .ops import nbytes
from .viz import Drawing, draw

_NOT_OPS = ("placeholder", "get_attr", "output")


class Traffic(NamedTuple):
    """Reads and writes, as counts of tensor accesses or as bytes (ch. 1)."""

    reads: int
    writes: int

    @property
    def total(self) -> int:
        return self.reads + self.writes


def _is_op(n: Node) -> bool:
    # torch.export's `_guards_fn` checks input shapes; it computes nothing
    return n.op not in _NOT_OPS and not (
        n.op == "call_module" and str(n.target).startswith("_guards"))


def levels(gm: GraphModule) -> list[list[Node]]:
    """Group the ops of `gm` by topological level (ops on one level are independent).

    Level 0 holds the ops that read only graph inputs and weights; every other op sits
    one level after the deepest op it reads. Within a level, nodes keep graph order.

    Introduced in chapter 1.
    """
    depth: dict[Node, int] = {}
    for n in gm.graph.nodes:  # fx keeps nodes in topological order
        if _is_op(n):
            depth[n] = 1 + max((depth[a] for a in n.all_input_nodes if a in depth),
                               default=-1)
    grouped: list[list[Node]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for n, d in depth.items():
        grouped[d].append(n)
    return grouped


def draw_levels(gm: GraphModule, **kwargs) -> Drawing:
    """Draw `gm` with the ops of each topological level side by side on one row.

    Introduced in chapter 1.
    """
    dot = draw(gm, **kwargs)
    for i, level in enumerate(levels(gm)):
        with dot.subgraph(name=f"level_{i}") as row:
            row.attr(rank="same")
            for n in level:
                row.node(n.name, xlabel=f"L{i}")
    return dot


def _inputs_and_weights(gm: GraphModule) -> list[Node]:
    return [n for n in gm.graph.nodes
            if n.op in ("placeholder", "get_attr") and n.users]


def _module_weight_bytes(gm: GraphModule) -> int:
    """Parameters and buffers held inside call_module nodes (module-level graphs)."""
    total = 0
    for n in gm.graph.nodes:
        if _is_op(n) and n.op == "call_module":
            module = gm.get_submodule(str(n.target))
            tensors = list(module.parameters()) + [
                b for name, b in module.named_buffers()
                if not name.endswith("num_batches_tracked")]
            total += sum(t.numel() * t.element_size() for t in tensors)
    return total


def _outputs(gm: GraphModule) -> list[Node]:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    return list(dict.fromkeys(out.all_input_nodes))


def accesses(gm: GraphModule, fused: bool = False) -> Traffic:
    """Count activation tensors read and written, the way seed 000 counts them (ch. 1).

    Unfused, every op reads each distinct activation it takes (graph inputs and other
    ops' results; weights are not counted) and writes one result. Fused into one kernel,
    only the graph inputs are read and the outputs written.
    """
    if fused:
        inputs = [n for n in _inputs_and_weights(gm) if n.op == "placeholder"]
        return Traffic(len(inputs), len(_outputs(gm)))
    ops = [n for n in gm.graph.nodes if _is_op(n)]
    reads = sum(len([a for a in dict.fromkeys(n.all_input_nodes) if a.op != "get_attr"])
                for n in ops)
    return Traffic(reads, len(ops))


def fused_traffic(gm: GraphModule) -> Traffic:
    """Bytes the ideal fully fused kernel moves: inputs and weights once, outputs once.

    This is the floor for running the graph at all; compare it with
    `graphopt.run(gm, x).bytes_read` and `.bytes_written`, which count every op
    separately (ch. 1).
    """
    read = sum(nbytes(n) for n in _inputs_and_weights(gm)) + _module_weight_bytes(gm)
    return Traffic(read, sum(nbytes(n) for n in _outputs(gm)))
