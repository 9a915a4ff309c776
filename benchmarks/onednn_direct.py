"""What making oneDNN's primitives once saves, conv by conv and per model (ch. 7).

Run:  python benchmarks/onednn_direct.py [--threads N] [--rounds R]
                                         [--models mobilenet_v3_small resnet18]

1. The fixed cost of one call: a 1x1 conv on a 4x4 map (almost no arithmetic)
   through torch's mkldnn op (its weight prepacked) and through a
   `ConvPrimitive` (`backend/onednn_direct.py`).
2. Every conv pattern of each model at batch 1, on the inputs it gets in the
   optimized model (captured by a hook): both ways, interleaved
   (graphopt.measure.compare: median, IQR), summed over the model.
3. A layout conversion (`ToLayout`) of a 3 x 224 x 224 image, batch 1 and 8, from
   NCHW into channels-last: torch's copy against oneDNN's reorder made once
   (`backend/onednn_reorder.py`).
4. The whole model at batch 1: eager, graphopt with the conv patterns on torch's
   mkldnn op and torch's copies (the backend planned with the direct path switched
   off), graphopt as it is (primitives made once), in one interleaved run.

Last line:  RESULT fixed_torch_us=<us> fixed_direct_us=<us> reorder_b<N>=<ratio>
            <model>_convs=<ratio> <model>_model=<ratio>
            (ratios: direct / torch's op)
"""

from __future__ import annotations

import argparse
from unittest import mock

import torch

import graphopt
from graphopt.backend import onednn, onednn_capi, onednn_direct, onednn_reorder
from graphopt.measure import compare
from graphopt.models import example
from graphopt.passes.activations import RELU
from graphopt.passes.convert_layout import ToLayout
from graphopt.passes.fused_modules import ConvAddReLU, ConvReLU


def through_torch(module, x, weight, bias, *other):
    """The conv pattern as torch's mkldnn op runs it, its weight prepacked."""
    args = (module.padding, module.stride, module.dilation, module.groups)
    packed = onednn.pack_conv_weight(weight, *args, x.shape)
    if isinstance(module, ConvAddReLU):
        return lambda: onednn.conv_add_relu(x, packed, bias, other[0], *args,
                                            relu=module.act.attr == "relu")
    return lambda: onednn.conv_act(x, packed, bias, *args, module.act)


def conv_calls(gm, inputs) -> list:
    """(module, its call's arguments) for every conv pattern of `gm` that runs a
    primitive, as called."""
    calls, hooks = [], []
    for m in gm.modules():
        if hasattr(m, "_primitive") and isinstance(m, ConvReLU):
            hooks.append(m.register_forward_pre_hook(
                lambda mod, args: calls.append((mod, args))))
    with torch.no_grad():
        gm.graph_module(*inputs) if hasattr(gm, "graph_module") else gm(*inputs)
    for h in hooks:
        h.remove()
    return calls


def per_conv(name: str, rounds: int, threads: int) -> float:
    """Sum of medians over the model's convs, direct / torch's op."""
    model, inputs = example(name, batch=1)
    gm = graphopt.optimize(model, *inputs).module
    sums = {"torch's op": 0.0, "primitive": 0.0}
    with torch.no_grad():
        for m, args in conv_calls(gm, inputs):
            x, w, b, *other = args
            prim = onednn_direct.ConvPrimitive(x, w, b, m.stride, m.padding,
                                               m.dilation, m.groups, m.act,
                                               add=bool(other))
            fns = {"torch's op": through_torch(m, *args),
                   "primitive": lambda p=prim, a=(x, b, *other): p(*a)}
            torch.testing.assert_close(fns["primitive"](), fns["torch's op"](),
                                       atol=1e-4, rtol=1e-4)
            t = compare(fns, rounds=rounds, threads=threads, min_run_time=0.3)
            for k in sums:
                sums[k] += t[k].median
    op, made = sums["torch's op"], sums["primitive"]
    print(f"{name}, batch 1, the conv patterns summed (medians): torch's op "
          f"{op * 1e3:.3f} ms, primitive {made * 1e3:.3f} ms")
    return sums["primitive"] / sums["torch's op"]


def fixed_cost(rounds: int, threads: int):
    """(torch's op, primitive) median seconds of a 1x1 conv on a 4x4 map."""
    x = torch.randn(1, 16, 4, 4).to(memory_format=torch.channels_last)
    w, b = torch.randn(16, 16, 1, 1), torch.randn(16)
    module = mock.Mock(padding=[0, 0], stride=[1, 1], dilation=[1, 1], groups=1,
                       act=RELU)
    prim = onednn_direct.ConvPrimitive(x, w, b, [1, 1], [0, 0], [1, 1], 1, module.act)
    with torch.no_grad():
        t = compare({"torch's op": through_torch(module, x, w, b),
                     "primitive": lambda: prim(x, b)}, rounds=rounds, threads=threads)
    print("1x1 conv, 16 channels, 4x4 map (the fixed cost of a call):")
    print(t)
    print("  " + t.verdict("torch's op", "primitive"))
    return t["torch's op"].median, t["primitive"].median


def layout_copy(batch: int, rounds: int, threads: int) -> float:
    """reorder / torch's copy, median times, of a batch of 224x224 images."""
    x = torch.randn(batch, 3, 224, 224)
    module = ToLayout("channels_last")
    module.copy = onednn_reorder.copy
    with torch.no_grad():
        module(x)  # made once, here
        t = compare({"torch's copy": lambda: x.contiguous(
            memory_format=torch.channels_last), "reorder": lambda: module(x)},
            rounds=rounds, threads=threads)
    print(f"NCHW -> channels-last, {batch} x 3 x 224 x 224 "
          f"({module._primitive.implementation}):")
    print(t)
    print("  " + t.verdict("torch's copy", "reorder"))
    return t["reorder"].median / t["torch's copy"].median


def whole_model(name: str, rounds: int, threads: int) -> float:
    model, inputs = example(name, batch=1)
    direct = graphopt.optimize(model, *inputs).module
    with mock.patch.object(onednn_direct, "supported", lambda act: False), \
            mock.patch.object(onednn_reorder, "binds", lambda node: False):
        op = graphopt.optimize(model, *inputs).module
    with torch.no_grad():
        t = compare({"eager": model, "graphopt, torch's op": op,
                     "graphopt, primitives": direct}, *inputs, rounds=rounds,
                    min_run_time=2.0, threads=threads)
    print(f"{name}, batch 1, the whole model:")
    print(t)
    print("  " + t.verdict("graphopt, torch's op", "graphopt, primitives"))
    print("  " + t.conditions)
    return t["graphopt, primitives"].median / t["graphopt, torch's op"].median


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--models", nargs="*", default=["mobilenet_v3_small", "resnet18"])
    a = p.parse_args()
    torch.set_num_threads(a.threads)  # before any primitive is made: made for it
    why = onednn_capi.why_unavailable()
    if why:
        raise SystemExit(f"oneDNN cannot be called directly here: {why}")
    torch_s, direct_s = fixed_cost(a.rounds, a.threads)
    result = [f"fixed_torch_us={torch_s * 1e6:.1f}",
              f"fixed_direct_us={direct_s * 1e6:.1f}"]
    result += [f"reorder_b{b}={layout_copy(b, a.rounds, a.threads):.3f}"
               for b in (1, 8)]
    for name in a.models:
        result.append(f"{name}_convs={per_conv(name, a.rounds, a.threads):.3f}")
        result.append(f"{name}_model={whole_model(name, a.rounds, a.threads):.3f}")
    print("RESULT " + " ".join(result))


if __name__ == "__main__":
    main()
