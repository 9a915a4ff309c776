"""Every way PyTorch can capture a graph, run side by side on the same model.

Introduced in chapter 2 (static and dynamic graphs). `compare_capture(model, *inputs)`
tries each capture method on the model and returns one `CaptureRow` per method:

    eager                       no graph: Python runs the ops one by one (dynamic graph)
    fx.symbolic_trace           Python runs once on proxies; module-level fx graph
    torch.export(strict=False)  Python runs once on fake tensors; aten-level fx graph
    torch.export(strict=True)   TorchDynamo reads the bytecode; aten-level fx graph
    torch.jit.script            TorchScript compiler parses the source (deprecated)
    torch.jit.trace             records the ops one run executed (deprecated)
    torch.compile               TorchDynamo + a backend; splits at graph breaks

A failure is a row, never an exception: the row keeps the error's type and first line.
Each captured callable is then checked against eager on *fresh* random inputs (same
shapes, different values) - that is how a trace that silently baked in one branch of an
`if` is caught. Torch's own logs, warnings and the model's prints are kept off the
screen and recorded in the row instead.

The files, in the order `compare_capture` uses them:

    methods.py       METHODS and one small capture function per method
    fresh_inputs.py  the inputs a captured form is checked on, and the check
    kernels.py       kernel launches: eager's aten ops, inductor's generated calls
    quiet.py         torch's logs, warnings and the model's prints kept off the screen
    side_by_side.py  compare_capture: capture, time and check each method
    table.py         CaptureRow, CaptureTable and their text and HTML tables
    seed_table.py    static_vs_dynamic: the seed's table read off measured rows
"""

from ..analysis import count_ops
from .fresh_inputs import make_fresh_inputs
from .kernels import eager_kernels, inductor_launches
from .methods import METHODS, torchscript_text
from .seed_table import static_vs_dynamic
from .side_by_side import compare_capture
from .table import CaptureRow, CaptureTable, Table, html_table, text_table

__all__ = [
    "METHODS", "CaptureRow", "CaptureTable", "Table", "compare_capture", "count_ops",
    "eager_kernels", "html_table", "inductor_launches", "make_fresh_inputs",
    "static_vs_dynamic", "text_table", "torchscript_text",
]
