"""The program: a fused group as straight-line code (chapter 6).

A fused group arrives as a small torch.fx GraphModule of elementwise ops (and row
reductions). Before any code is written it is turned into a *program* (`lowering`
builds it): a straight list of statements

    t_mul = mul(x=a0, y=2.0)
    t_add = add(x=t_mul, y=a1)
    t_relu = relu(x=t_add)

where `a0, a1` are the values loaded from the input tensors for one output element and
`2.0` is a constant baked into the graph. Each generator turns one statement into one
line of its own language from the op's row in `op_table.OPS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..torch_internals import tree_unflatten


@dataclass(frozen=True)
class Const:
    """A scalar baked into the graph; generators cast it to the kernel's dtype
    (ch. 6)."""

    value: float


@dataclass(frozen=True)
class Stmt:
    """One line of the program (ch. 6): `var = op(**args)`; args map to var names
    or Consts."""

    var: str
    op: str
    args: tuple[tuple[str, Any], ...]

    def text(self) -> str:
        shown = ", ".join(f"{k}={v.value if isinstance(v, Const) else v}"
                          for k, v in self.args)
        return f"{self.var} = {self.op}({shown})"


@dataclass
class Program:
    """A fused group as straight-line code: inputs, statements, outputs (ch. 6)."""

    inputs: list[str]                      # one load variable per input tensor
    constants: list[torch.Tensor] = field(default_factory=list)  # get_attr tensors
    stmts: list[Stmt] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    tuple_output: bool = False             # the graph returned a tuple/list
    out_spec: Any = None                   # torch.export's pytree spec of the result

    def pack(self, outputs: list):
        """Results in the structure the group's GraphModule returns them."""
        if self.out_spec is not None:
            return tree_unflatten(outputs, self.out_spec)
        return tuple(outputs) if self.tuple_output else outputs[0]

    def text(self) -> str:
        """The op sequence as text: the part of a kernel's cache key that is math."""
        lines = [f"inputs {', '.join(self.inputs)}"] + [s.text() for s in self.stmts]
        return "\n".join(lines + [f"return {', '.join(self.outputs)}"])

    def operands(self, stmt: Stmt) -> list[str]:
        return [v for _, v in stmt.args if isinstance(v, str)]
