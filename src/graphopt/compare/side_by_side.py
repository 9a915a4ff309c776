"""compare_capture: capture a model with every method, then time and check each form.

Chapter 2. Each method gets its own copy of the model; a failure at capture time, at
run time or on fresh inputs becomes the row's result, never an exception.
"""

from __future__ import annotations

import copy
import inspect
import statistics
import time

import torch
from torch import nn

from ..capture import _first_line, check_inputs
from ..errors import InputError
from .fresh_inputs import check_fresh, check_row, eager_outputs, make_fresh_inputs
from .kernels import eager_kernels
from .methods import CAPTURERS, DEPRECATED, METHODS
from .quiet import quiet
from .table import CaptureRow, CaptureTable


def compare_capture(model, *inputs, methods=METHODS, fresh_inputs=None,
                    compile_backend: str = "inductor", runs: int = 5,
                    rtol: float = 1e-4, atol: float = 1e-5,
                    **keyword_inputs) -> CaptureTable:
    """Capture `model` with each method in `methods`: one `CaptureRow` each (chapter 2).

    `fresh_inputs` is a list of input tuples used to check each captured form against
    eager; by default two random draws with the shapes and dtypes of `inputs`, the
    second the negation of the first (so a branch on a sign sees both sides).
    `compile_backend="eager"` runs TorchDynamo without inductor's code generation:
    graph breaks are the same, and it costs a fraction of a second instead of ~10 s.
    Keyword inputs are taken as the model takes them (`compare_capture(bert,
    input_ids=ids, attention_mask=mask)`): they are passed by position in forward's
    order, so every method sees the same call; `fresh_inputs` then holds tuples in
    that order. The caller's model is not changed.
    Bounded: ResNet-18 64x64, backend "eager": 874 MiB RSS, 1517 MiB address
    space, 16 s on 2 cores (README: Bounds).
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise InputError(
            f"unknown capture method(s) {unknown}; choose from {list(METHODS)}")
    check_inputs(model, inputs, keyword_inputs)
    model, inputs = by_position(model, inputs, keyword_inputs)
    if runs < 1:
        raise InputError(f"runs must be at least 1, not {runs}.")
    if fresh_inputs is None:
        fresh_inputs = make_fresh_inputs(inputs)
    check_fresh(fresh_inputs, len(inputs))
    reference = eager_outputs(_private_copy(model), fresh_inputs)
    table = CaptureTable()
    for method in methods:
        row = _capture_one(method, _private_copy(model), inputs, compile_backend)
        timed = row.captured and _time(row, inputs, runs)
        if timed and row.method != "eager" and reference is not None:
            check_row(row, fresh_inputs, reference, rtol, atol)
        table.append(row)
    return table


def by_position(model, inputs, keyword_inputs):
    """(model, inputs) with the keyword inputs moved into forward's positions.

    When a keyword skips an optional argument (token_type_ids given, attention_mask
    not), the model is wrapped so that the given tensors are its inputs.
    """
    if not keyword_inputs:
        return model, tuple(inputs)
    forward = model.forward if isinstance(model, nn.Module) else model
    try:
        bound = inspect.signature(forward).bind(*inputs, **keyword_inputs)
    except TypeError as e:
        raise InputError(f"{e}: pass the inputs as the model's forward takes them.") \
            from None
    names = list(inspect.signature(forward).parameters)
    given = [names.index(k) for k in bound.arguments]
    if given == list(range(len(given))):
        return model, tuple(bound.arguments.values())
    return _Keywords(model, list(bound.arguments)), tuple(bound.arguments.values())


class _Keywords(nn.Module):
    """Calls `model` with its given inputs by name: forward(*tensors)."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *tensors):
        return self.model(**dict(zip(self.names, tensors)))


def _private_copy(model):
    """Each method gets its own copy: running a model in training mode updates its
    BatchNorm statistics, and the caller's model must not change."""
    if not isinstance(model, nn.Module):
        return model
    try:
        return copy.deepcopy(model)
    except Exception:  # an uncopyable module: use it as is
        return model


def _capture_one(method: str, model, inputs, compile_backend: str) -> CaptureRow:
    label = method
    if method == "torch.compile" and compile_backend != "inductor":
        label = f"torch.compile(backend={compile_backend!r})"
    start = time.perf_counter()
    with quiet() as record:
        try:
            with torch.no_grad():
                row = CAPTURERS[method](model, inputs, compile_backend)
        except Exception as e:  # the model's failure is this row's result
            row = CaptureRow(method, captured=False, error_type=type(e).__name__,
                             error=_first_line(e), exception=e)
    row.method = label
    if method != "eager" and row.capture_s is None:
        row.capture_s = time.perf_counter() - start
    row.warnings = record.warnings
    if method in DEPRECATED:
        row.deprecation = next(iter(record.deprecations), None)
    row.prints_at_capture = record.printed_lines()
    return row


def _time(row: CaptureRow, inputs, runs: int) -> bool:
    """Median steady-state time on `inputs`; False (and a failed row) if it raises."""
    fn = row.module
    try:
        with torch.no_grad():
            with quiet():
                fn(*inputs)  # warm-up: TorchScript's profiling executor specialises
            with quiet() as record:
                fn(*inputs)
            row.prints_per_call = record.printed_lines()
            row.run_s = _median_time(fn, inputs, runs)
            if row.method == "eager":
                row.kernels = _try_eager_kernels(fn, inputs)
    except Exception as e:  # captured, yet it cannot run: that is the row's result
        row.captured, row.module = False, None
        row.error_type, row.error, row.exception = type(e).__name__, _first_line(e), e
        return False
    return True


def _try_eager_kernels(model, inputs) -> list[str] | None:
    try:
        with quiet():
            return eager_kernels(model, *inputs)
    except Exception:  # a model a dispatch mode cannot see through: count unknown
        return None


def _median_time(fn, inputs, runs: int) -> float:
    """Median wall time of `runs` calls; waits for the GPU when the inputs are there."""
    cuda = any(isinstance(x, torch.Tensor) and x.is_cuda for x in inputs)
    times = []
    with quiet():
        for _ in range(runs):
            if cuda:
                torch.cuda.synchronize()
            t = time.perf_counter()
            fn(*inputs)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    return statistics.median(times)
