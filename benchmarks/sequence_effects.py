"""MobileNetV3-Small on one thread: graphopt against ONNX Runtime, whole and kernel by
kernel (chapter 7, issue 39: where the last part of the gap to ORT lies).

On a shared virtual machine the wall clock also counts other tenants' time. With one
intra-op thread every engine here runs on the calling thread, so that thread's CPU
time (`time.thread_time`) counts only this process's work: the ratios below hold
still where wall-clock medians move 30 % between runs.

1. The whole model, batch 1: graphopt's optimised module, ORT (all optimisations),
   eager, and graphopt with oneDNN's first choice of implementation everywhere
   (`onednn_choice.first_choices`), in interleaved rounds; CPU time per call, and
   graphopt / ORT and graphopt / first choices per round.
2. The model's 1x1 and depthwise convolutions on maps larger than 1x1 (the
   squeeze-excite ones left out), each alone: oneDNN on channels-last images with
   its first choice of implementation and with the one the backend binds
   (`onednn_choice.INSTEAD`), oneDNN on its blocked layout (`aBcd8b`, nChw8c: what
   a blocked backend mode would bind through the C API, its weight prepacked for
   it), and ORT's own NCHWc conv kernel (its profiler's time for the Conv node
   alone, without the layout conversions around it). oneDNN's times include the
   Python call; its three outputs are checked against torch's conv first.
3. The same convolutions one after another, each on its own input, against the
   sum of their calls alone (do different kernels in turn push each other out of
   the caches?), for oneDNN's first choices and for the bound ones.
4. ResNet-18's dense 3x3 convolutions alone: oneDNN's first choice against its
   direct `jit` kernel (why `onednn_choice.INSTEAD` does not list them).

Run:  python benchmarks/sequence_effects.py [--quick] [--rounds R]
Last line:  RESULT go_vs_ort_cpu=<x> go_vs_first_choices=<x> bound_vs_first=<x>
            blocked_vs_first=<x> ort_vs_first=<x> in_turn_first=<x> in_turn_bound=<x>
            resnet_3x3_jit_vs_first=<x>
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
from graphopt.backend import onednn_choice, onednn_direct
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


def whole_model(rounds: int, calls: int) -> tuple[float, float]:
    """Part 1; returns the median per-round ratios graphopt / ORT and graphopt /
    graphopt with oneDNN's first choices."""
    model, x = example("mobilenet_v3_small", batch=1)
    fast, first = (graphopt.optimize(model, *x).module for _ in range(2))
    with onednn_choice.first_choices():
        first(*x)  # its primitives are made on the first call: oneDNN's own picks
    session, feed = ort_session(model, x)
    variants = {"graphopt": lambda: fast(*x), "ort": lambda: session.run(None, feed),
                "eager": lambda: model(*x), "first_choices": lambda: first(*x)}
    times = {v: [] for v in variants}
    for r in range(rounds):
        order = list(variants)[r % 4:] + list(variants)[:r % 4]
        for v in order:
            times[v].append(cpu_per_call(variants[v], calls))
    ratio = statistics.median(g / o for g, o in zip(times["graphopt"], times["ort"]))
    print(f"1. MobileNetV3-Small, batch 1, 1 thread, {rounds} rounds x {calls} calls "
          "(CPU ms per call, median and IQR):")
    for v, t in times.items():
        q = statistics.quantiles(t, n=4)
        print(f"   {v:9s} {statistics.median(t) * 1e3:7.3f}  "
              f"({q[0] * 1e3:.3f}-{q[2] * 1e3:.3f})")
    choice = statistics.median(g / f for g, f in zip(times["graphopt"],
                                                      times["first_choices"]))
    print(f"   graphopt / ORT, per round: {ratio:.2f}; graphopt / the same with "
          f"oneDNN's first choices (no onednn_choice.INSTEAD): {choice:.2f}")
    return ratio, choice


def conv_shapes(name="mobilenet_v3_small", dense=False) -> list[tuple[nn.Conv2d, int]]:
    """(conv, map size) of the model's 1x1 and depthwise convs on maps > 1x1, or
    (`dense`) of its 3x3 convs with one group."""
    model, x = example(name, batch=1)
    shapes = []

    def record(conv, args, _out):
        pointwise = conv.kernel_size == (1, 1) and conv.groups == 1
        wanted = conv.kernel_size == (3, 3) and conv.groups == 1 if dense else \
            pointwise or conv.groups == conv.in_channels > 1
        if wanted and args[0].shape[-1] > 1:
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


def onednn_calls(shape) -> dict:
    """One conv shape on its own input: calls for oneDNN's first choice and the
    bound one (channels-last) and the blocked one, their names, the conv, x."""
    model_conv, size = shape
    c = model_conv
    conv = nn.Conv2d(c.in_channels, c.out_channels, c.kernel_size, c.stride,
                     c.padding, groups=c.groups).eval()
    w, b = conv.weight.detach(), conv.bias.detach()
    x = torch.randn(1, c.in_channels, size, size).contiguous(
        memory_format=torch.channels_last)
    args = (w, b, conv.stride, conv.padding, (1, 1), conv.groups, ACTIVATIONS["none"])
    with onednn_choice.first_choices():
        first, blocked = onednn_direct.ConvPrimitive(x, *args), BlockedConv(x, *args)
    bound = onednn_direct.ConvPrimitive(x, *args)
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
    for got in (first(x, b), bound(x, b), from_blocked(blocked_call(), want.shape)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    return {"calls": ((lambda: first(x, b)), (lambda: bound(x, b)), blocked_call),
            "names": (first.implementation, bound.implementation,
                      blocked.implementation), "conv": conv, "x": x}


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


def pointwise(calls: int) -> dict[str, float]:
    """Parts 2 and 3; returns the ratios to oneDNN's first choice over all the convs
    alone (bound, blocked, ORT's kernel) and the in-turn over alone ratios."""
    capi.memory_desc = _tagged_memory_desc
    try:
        made = [onednn_calls(s) for s in conv_shapes()]
    finally:
        capi.memory_desc = _plain_memory_desc
    print("2. the convs alone, batch 1, 1 thread (median us per call): oneDNN's "
          "first choice, the one bound, blocked; ORT's kernel")
    sums = {"1x1": [0.0] * 4, "depthwise": [0.0] * 4}
    with tempfile.TemporaryDirectory() as folder:
        for m in made:
            conv, x = m["conv"], m["x"]
            row = [median_wall(c, calls) for c in m["calls"]]
            row.append(ort_conv_kernel(conv, x, calls, folder))
            kind = "1x1" if conv.groups == 1 else "depthwise"
            sums[kind] = [a + t for a, t in zip(sums[kind], row)]
            cells = "  ".join(f"{t * 1e6:6.1f} ({n})" for t, n in zip(row, m["names"]))
            print(f"   {kind:9s} {conv.in_channels:4d} -> {conv.out_channels:4d} on "
                  f"{x.shape[-1]:3d}^2  {cells}  ORT {row[3] * 1e6:6.1f}")
    for kind, (a, *others) in sums.items():
        print(f"   {kind} sums: first choice {a * 1e3:.3f} ms; " + ", ".join(
            f"{n} {t * 1e3:.3f} ms ({t / a:.2f}x)"
            for n, t in zip(("bound", "blocked", "ORT"), others)))
    total = [sum(col) for col in zip(*sums.values())]
    ratios = dict(zip(("bound_vs_first", "blocked_vs_first", "ort_vs_first"),
                      (t / total[0] for t in total[1:])))
    for i, name in enumerate(("first choice", "bound")):
        in_turn = [m["calls"][i] for m in made]
        alone = sum(cpu_per_call(c, calls) for c in in_turn)
        turn = cpu_per_call(lambda: [c() for c in in_turn], calls)  # noqa: B023
        print(f"3. the same {len(made)} convs in turn, {name}: {turn * 1e3:.3f} CPU ms"
              f" against {alone * 1e3:.3f} for each alone, repeated "
              f"({turn / alone:.2f}x)")
        ratios[f"in_turn_{name.split()[0]}"] = turn / alone
    return ratios


def dense_3x3(calls: int) -> float:
    """Part 4: ResNet-18's 3x3 convs, oneDNN's first choice against its direct `jit`
    kernel (what listing them in INSTEAD would bind); returns jit / first choice."""
    times = [0.0, 0.0]
    for conv, size in conv_shapes("resnet18", dense=True):
        x = torch.randn(1, conv.in_channels, size, size).contiguous(
            memory_format=torch.channels_last)
        b = conv.bias if conv.bias is not None else torch.zeros(conv.out_channels)
        args = (conv.weight.detach(), b.detach(), conv.stride, conv.padding, (1, 1),
                1, ACTIVATIONS["none"])
        with onednn_choice.first_choices():
            first = onednn_direct.ConvPrimitive(x, *args)
            onednn_choice.INSTEAD[first.implementation] = \
                first.implementation.replace("brgconv", "jit")
            direct = onednn_direct.ConvPrimitive(x, *args)
        for i, p in enumerate((first, direct)):
            torch.testing.assert_close(p(x, b), conv(x), rtol=1e-3, atol=1e-3)
            times[i] += cpu_per_call(lambda p=p, x=x, b=b: p(x, b), calls)
    print(f"4. ResNet-18's 3x3 convs, batch 1, each alone: {first.implementation} "
          f"{times[0] * 1e3:.3f} CPU ms, {direct.implementation} {times[1] * 1e3:.3f}"
          f" ms ({times[1] / times[0]:.2f}x)")
    return times[1] / times[0]


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
    ratio, choice = whole_model(rounds, calls)
    convs = pointwise(calls * 5)
    convs["resnet_3x3_jit_vs_first"] = dense_3x3(calls // 2)
    print(f"RESULT go_vs_ort_cpu={ratio:.2f} go_vs_first_choices={choice:.2f} " +
          " ".join(f"{k}={v:.2f}" for k, v in convs.items()))


if __name__ == "__main__":
    main()
