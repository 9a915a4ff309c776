"""MobileNetV3-Small on one thread: graphopt against ONNX Runtime, whole and kernel by
kernel (chapter 7, issue 39: where the last part of the gap to ORT lies).

On a shared virtual machine the wall clock also counts other tenants' time. With one
intra-op thread every engine here runs on the calling thread, so that thread's CPU
time (`time.thread_time`) counts only this process's work: the ratios below hold
still where wall-clock medians move 30 % between runs.

1. The whole model, batch 1: graphopt's optimised module, ORT (all optimisations)
   and eager, in interleaved rounds; CPU time per call, and graphopt / ORT per round.
2. The model's 1x1 and depthwise convolutions on maps larger than 1x1 (the
   squeeze-excite ones left out), each alone: oneDNN on the channels-last layout
   the backend binds (`acdb`), oneDNN on its blocked layout (`aBcd8b`, nChw8c:
   what a blocked backend mode would bind through the C API, its weight prepacked
   for it), and ORT's own NCHWc conv kernel (its profiler's time for the Conv node
   alone, without the layout conversions around it). oneDNN's times include the
   Python call; both of its outputs are checked against torch's conv first.
3. The same convolutions one after another, each on its own input: oneDNN's
   sequence against the sum of its isolated calls (do different kernels in turn
   push each other out of the caches?).

Run:  python benchmarks/sequence_effects.py [--quick] [--rounds R]
Last line:  RESULT go_vs_ort_cpu=<x> blocked_vs_acdb=<x> ort_conv_vs_acdb=<x>
            rotation=<x>
"""

from __future__ import annotations

import argparse
import ctypes
import io
import json
import os
import statistics
import tempfile
import time
import warnings

import torch
from torch import nn

import graphopt
from graphopt.backend import onednn_capi as capi
from graphopt.backend import onednn_direct
from graphopt.models import example
from graphopt.passes.activations import ACTIVATIONS


def cpu_per_call(fn, calls: int) -> float:
    """This thread's CPU seconds per call of `fn`, over `calls` calls."""
    start = time.thread_time()
    for _ in range(calls):
        fn()
    return (time.thread_time() - start) / calls


def ort_session(model, inputs, profile: str | None = None):
    """An ORT session of `model` (exported with the TorchScript exporter), one thread,
    no spinning; `profile`: a file prefix for its profiler."""
    import onnxruntime as ort

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, buf, dynamo=False)
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if profile:
        so.enable_profiling, so.profile_file_prefix = True, profile
    session = ort.InferenceSession(buf.getvalue(), so,
                                   providers=["CPUExecutionProvider"])
    feed = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)}
    return session, feed


def whole_model(rounds: int, calls: int) -> float:
    """Part 1; returns the median per-round ratio graphopt / ORT."""
    model, x = example("mobilenet_v3_small", batch=1)
    fast = graphopt.optimize(model, *x).module
    session, feed = ort_session(model, x)
    variants = {"graphopt": lambda: fast(*x), "ort": lambda: session.run(None, feed),
                "eager": lambda: model(*x)}
    times = {v: [] for v in variants}
    for r in range(rounds):
        order = list(variants)[r % 3:] + list(variants)[:r % 3]
        for v in order:
            times[v].append(cpu_per_call(variants[v], calls))
    ratio = statistics.median(g / o for g, o in zip(times["graphopt"], times["ort"]))
    print(f"1. MobileNetV3-Small, batch 1, 1 thread, {rounds} rounds x {calls} calls "
          "(CPU ms per call, median and IQR):")
    for v, t in times.items():
        q = statistics.quantiles(t, n=4)
        print(f"   {v:9s} {statistics.median(t) * 1e3:7.3f}  "
              f"({q[0] * 1e3:.3f}-{q[2] * 1e3:.3f})")
    print(f"   graphopt / ORT, per round: {ratio:.2f}")
    return ratio


def conv_shapes() -> list[tuple[nn.Conv2d, int]]:
    """(conv, map size) of the model's 1x1 and depthwise convs on maps > 1x1."""
    model, x = example("mobilenet_v3_small", batch=1)
    shapes = []

    def record(conv, args, _out):
        pointwise = conv.kernel_size == (1, 1) and conv.groups == 1
        if (pointwise or conv.groups == conv.in_channels > 1) and \
                args[0].shape[-1] > 1:
            shapes.append((conv, args[0].shape[-1]))

    hooks = [m.register_forward_hook(record) for m in model.modules()
             if isinstance(m, nn.Conv2d)]
    model(*x)
    for h in hooks:
        h.remove()
    return shapes


class BlockedConv(onednn_direct.ConvPrimitive):
    """The backend's conv primitive with src and dst in oneDNN's nChw8c layout."""

    def _shapes(self, x, weight):
        (xs, _), (ys, _), w = super()._shapes(x, weight)
        return (list(xs), "aBcd8b"), (list(ys), "aBcd8b"), w


def _tagged_memory_desc(shape, strides=None):
    """capi.memory_desc, with a layout named by oneDNN's string tag where `strides`
    is one ("aBcd8b"): the benchmark's blocked descriptors."""
    if not isinstance(strides, str):
        return _plain_memory_desc(shape, strides)
    md = capi.Handle()
    capi.call("dnnl_memory_desc_create_with_string_tag", ctypes.byref(md),
              len(shape), capi.Dims(*shape), capi.F32, strides.encode())
    return md


_plain_memory_desc = capi.memory_desc


def to_blocked(x: torch.Tensor) -> torch.Tensor:
    """An (N, C, H, W) image in nChw8c order, flat: (N, C/8, H, W, 8)."""
    n, c, h, w = x.shape
    return x.reshape(n, c // 8, 8, h, w).permute(0, 1, 3, 4, 2).contiguous().ravel()


def from_blocked(flat: torch.Tensor, shape) -> torch.Tensor:
    n, c, h, w = shape
    return flat.reshape(n, c // 8, h, w, 8).permute(0, 1, 4, 2, 3).reshape(shape)


def median_wall(fn, calls: int) -> float:
    fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def onednn_calls(shape):
    """(channels-last call, blocked call) of one conv shape, each on its input."""
    model_conv, size = shape
    c = model_conv
    conv = nn.Conv2d(c.in_channels, c.out_channels, c.kernel_size, c.stride,
                     c.padding, groups=c.groups).eval()
    w, b = conv.weight.detach(), conv.bias.detach()
    x = torch.randn(1, c.in_channels, size, size).contiguous(
        memory_format=torch.channels_last)
    args = (w, b, conv.stride, conv.padding, (1, 1), conv.groups, ACTIVATIONS["none"])
    plain = onednn_direct.ConvPrimitive(x, *args)
    blocked = BlockedConv(x, *args)
    size_of = capi.library().lib.dnnl_memory_desc_get_size
    src = to_blocked(x)  # channels a multiple of 8 in every conv of the model
    assert src.numel() == size_of(blocked._mds[0]) // 4, "channels padded"
    dst_numel = size_of(blocked._mds[1]) // 4
    p, stream, nargs, argv, s, d, bias_mem, _ = blocked._handles

    def blocked_call():
        out = torch.empty(dst_numel)  # named: it must outlive the native call
        blocked._run(p, stream, nargs, argv, s, src.data_ptr(), d, out.data_ptr(),
                     bias_mem, b.data_ptr(), 0, 0)
        return out

    want = conv(x)
    for got in (plain(x, b), from_blocked(blocked_call(), want.shape)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    return (lambda: plain(x, b)), blocked_call, plain.implementation, \
        blocked.implementation, conv, x


def ort_conv_kernel(conv, x, calls: int, folder: str) -> float:
    """Seconds of ORT's Conv kernel alone (its profiler), median over `calls`."""
    session, feed = ort_session(conv, (x.contiguous(),), f"{folder}/conv")
    for _ in range(calls):
        session.run(None, feed)
    with open(session.end_profiling()) as f:
        trace = json.load(f)
    kernel = [e["dur"] for e in trace if e.get("cat") == "Node"
              and e["name"].endswith("_kernel_time") and e["args"]["op_name"] == "Conv"]
    return statistics.median(kernel[len(kernel) // 4:]) * 1e-6


def pointwise(calls: int) -> tuple[float, float, float]:
    """Parts 2 and 3; returns (blocked / acdb, ORT / acdb, sequence / isolated),
    the first two over all the convs."""
    capi.memory_desc = _tagged_memory_desc
    try:
        made = [onednn_calls(s) for s in conv_shapes()]
    finally:
        capi.memory_desc = _plain_memory_desc
    print("2. the convs alone, batch 1, 1 thread (median us per call):")
    sums = {"1x1": [0.0] * 3, "depthwise": [0.0] * 3}
    with tempfile.TemporaryDirectory() as folder:
        for plain, blocked, impl, bimpl, conv, x in made:
            row = (median_wall(plain, calls), median_wall(blocked, calls),
                   ort_conv_kernel(conv, x, calls, folder))
            kind = "1x1" if conv.groups == 1 else "depthwise"
            sums[kind] = [a + t for a, t in zip(sums[kind], row)]
            print(f"   {kind:9s} {conv.in_channels:4d} -> {conv.out_channels:4d} on "
                  f"{x.shape[-1]:2d}x{x.shape[-1]:<2d}  acdb {row[0] * 1e6:6.1f} "
                  f"({impl})  aBcd8b {row[1] * 1e6:6.1f} ({bimpl})  "
                  f"ORT conv {row[2] * 1e6:6.1f}")
    for kind, (a, bl, o) in sums.items():
        print(f"   {kind} sums: acdb {a * 1e3:.3f} ms, aBcd8b {bl * 1e3:.3f} ms "
              f"({bl / a:.2f}x), ORT's conv kernels {o * 1e3:.3f} ms ({o / a:.2f}x)")
    calls_in_turn = [plain for plain, *_ in made]
    alone = sum(cpu_per_call(c, calls) for c in calls_in_turn)
    in_turn = cpu_per_call(lambda: [c() for c in calls_in_turn], calls)
    print(f"3. the same {len(made)} convs in turn: {in_turn * 1e3:.3f} CPU ms against "
          f"{alone * 1e3:.3f} for each alone, repeated ({in_turn / alone:.2f}x)")
    a, bl, o = (sum(col) for col in zip(*sums.values()))
    return bl / a, o / a, in_turn / alone


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 rounds, fewer calls")
    p.add_argument("--rounds", type=int, default=None)
    args = p.parse_args()
    rounds = args.rounds or (3 if args.quick else 15)
    calls = 10 if args.quick else 60
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    if capi.why_unavailable():
        raise SystemExit(f"oneDNN's C API: {capi.why_unavailable()}")
    print(f"torch {torch.__version__}, oneDNN {capi.version()}, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    ratio = whole_model(rounds, calls)
    blocked, ort_conv, rotation = pointwise(calls * 5)
    print(f"RESULT go_vs_ort_cpu={ratio:.2f} blocked_vs_acdb={blocked:.2f} "
          f"ort_conv_vs_acdb={ort_conv:.2f} rotation={rotation:.2f}")


if __name__ == "__main__":
    main()
