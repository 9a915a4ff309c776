"""Hide the exporter's and compiler's chatter nobody asked for (chapter 7).

The ONNX exporter prints progress and logs warnings such as "torchvision is not
installed. Skipping ..." or its own constant folder's "Evaluation failed: ..." (it
then keeps the node, which is correct); a notebook cell would show all of it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings


@contextlib.contextmanager
def quiet():
    """Hide export/compile chatter (progress prints, warnings) nobody asked for."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "onnxscript", "onnx_ir")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
