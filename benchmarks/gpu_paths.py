"""The book's GPU paths, measured in one run (benchmarks/gpu_check.sh calls this).

    python benchmarks/gpu_paths.py kernels  [--dry-run] [--out DIR]
    python benchmarks/gpu_paths.py graphs   [--dry-run] [--out DIR]
    python benchmarks/gpu_paths.py explorer [--dry-run] [--out DIR]

kernels   each generated Triton kernel of chapter 6 (elementwise chain, per-channel
          affine, softmax, layer norm, GELU + layer norm) timed with CUDA events
          against the device's own copy bandwidth (copy_ timed the same way), and
          the registers the driver reports for the chain's kernel next to the ones
          compiled ahead of time (codegen.aot) for the same GPU;
graphs    the lecture notes' "GPU utilisation 30% -> 85%": a BERT encoder run
          eagerly (one launch per op), replayed as one CUDA graph, and compiled by
          inductor (fused kernels) with and without CUDA graphs; busy =
          the kernels' summed device time (torch.profiler) over the wall time of a
          call (CUDA events, no profiler running);
explorer  the explorer's GPU numbers on ResNet-18 and BERT: per stage, time from
          the interleaved rounds on the GPU, the CUDA allocator's peak, the
          interpreter's exact peak and the time predicted for an H100.

--dry-run runs the same code on the CPU with small sizes (Triton kernels under
TRITON_INTERPRET=1, set by gpu_check.sh before Python starts): it proves the script
runs, and measures nothing worth keeping. Results go to --out as text files.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import fx

from graphopt import codegen, measure


def kernel_cases(dry: bool):
    """(name, function, inputs): chapter 6's fused groups at a size past the caches."""
    g = torch.Generator().manual_seed(0)
    n, d = (1 << 12, 256) if dry else (1 << 24, 1024)

    def r(*s):
        return torch.randn(*s, generator=g)
    w, b = r(d), r(d)
    return [
        ("chain8", lambda x: -(((torch.relu(x * 1.5 + 0.5) - 0.25).abs() * 0.75)
                               - 0.1), (r(n),)),
        ("per_channel_affine_relu", lambda x, a, c: torch.relu(x * a + c),
         (r(n // 4096, 64, 64), r(n // 4096, 1, 1), r(n // 4096, 1, 1))),
        ("softmax", lambda x: torch.softmax(x * 0.125, -1), (r(n // d, d),)),
        ("layer_norm", lambda x: F.layer_norm(x, [d], w, b), (r(n // d, d),)),
        ("gelu_layer_norm", lambda x: F.layer_norm(F.gelu(x), [d]), (r(n // d, d),)),
    ]


def timed(fn, device):
    if device == "cuda":
        return measure.time_cuda_events(fn, repeats=20, warmup=3).median
    return measure.time_fn(fn, min_run_time=0.05).median


def kernels(device: str, dry: bool, say) -> None:
    numel = 1 << (12 if dry else 26)
    src = torch.randn(numel, device=device)
    dst = torch.empty_like(src)
    copy_gbps = 2 * src.nbytes / timed(lambda: dst.copy_(src), device) / 1e9
    say(f"copy_ of {src.nbytes >> 20} MiB: {copy_gbps:.0f} GB/s (the memory roof)")
    say(f"{'kernel':26}{'MiB moved':>10}{'time':>11}{'GB/s':>8}{'of copy':>9}"
        "  max |err|")
    for name, fn, args in kernel_cases(dry):
        args = tuple(a.to(device) for a in args)
        gm = fx.symbolic_trace(fn)
        k = codegen.compile_group(gm, args, backend="triton")
        out = k(*args)
        err = (out.double() - gm(*args).double()).abs().max().item()
        t = timed(lambda k=k, args=args, out=out: k(*args, out=out), device)
        nbytes = sum(a.nbytes for a in args) + out.nbytes
        gbps = nbytes / t / 1e9
        say(f"{name:26}{nbytes / 2**20:>10.0f}{measure.fmt_time(t):>11}"
            f"{gbps:>8.0f}{gbps / copy_gbps:>9.2f}  {err:.2g}")
    aot_against_driver(device, dry, say)


def aot_against_driver(device: str, dry: bool, say) -> None:
    """The chain's kernel: the driver's register count against the AOT compile."""
    from graphopt.codegen import aot
    name, fn, args = kernel_cases(dry)[0]
    k = codegen.compile_group(fx.symbolic_trace(fn), args, backend="triton")
    if device != "cuda":
        ahead = aot.compile_group(k, "sm_90", block=1024).resources
        say(f"{name}, compiled ahead of time: {ahead} (no driver to compare with)")
        return
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    x = args[0].to(device)
    launched = aot.jit_from_source(k.source)[(x.numel() // 1024,)](
        x, torch.empty_like(x), x.numel(), BLOCK=1024)
    say(f"{name} on {arch}, driver: {launched.n_regs} registers, "
        f"{launched.n_spills} spills")
    if arch in aot.ARCHS:
        say(f"{name}, compiled ahead of time: {aot.compile_group(k, arch).resources}")


def busy_fraction(fn, device: str, calls: int = 20):
    """Kernels' summed device time per call over a call's wall time (None on CPU)."""
    from torch.profiler import ProfilerActivity, profile
    wall = timed(fn, device)
    if device != "cuda":
        return None, wall
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernel_us = sum(getattr(e, "self_device_time_total", 0)
                    for e in prof.key_averages())
    return kernel_us * 1e-6 / calls / wall, wall


def graphs(device: str, dry: bool, say) -> None:
    from graphopt.models import example
    model, inputs = example("bert", seq_len=32 if dry else 128)
    model = model.to(device)
    inputs = tuple(x.to(device) for x in inputs)
    variants = {"eager (one launch per op)": lambda: model(*inputs)}
    if device == "cuda":
        variants.update(gpu_variants(model, inputs, say))
    say(f"BERT encoder, {tuple(inputs[0].shape)} tokens, on {device}")
    with torch.no_grad():
        for name, fn in variants.items():
            try:
                busy, wall = busy_fraction(fn, device)
            except Exception as e:  # noqa: BLE001 - one variant failing is a result
                say(f"{name:36} failed: {type(e).__name__}: {e}")
                continue
            busy_text = "n/a (CPU)" if busy is None else f"{busy:.0%}"
            say(f"{name:36} {measure.fmt_time(wall):>10} per call, "
                f"GPU busy {busy_text}")


def gpu_variants(model, inputs, say) -> dict:
    """One CUDA graph of the eager ops; inductor's fused kernels, with and without
    CUDA graphs (mode="reduce-overhead"): fusing and launching less, separately."""
    out = {}
    with torch.no_grad():
        try:
            side = torch.cuda.Stream()  # warm up on a side stream, as torch's docs ask
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    model(*inputs)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                model(*inputs)
            out["eager ops in one CUDA graph"] = graph.replay
        except Exception as e:  # noqa: BLE001
            say(f"CUDA graph capture failed: {type(e).__name__}: {e}")
        for mode, label in ((None, "inductor (fused kernels)"),
                            ("reduce-overhead", "inductor + CUDA graphs")):
            try:
                compiled = torch.compile(model, mode=mode)
                for _ in range(3):
                    compiled(*inputs)
                out[label] = lambda c=compiled: c(*inputs)
            except Exception as e:  # noqa: BLE001
                say(f"{label} failed: {type(e).__name__}: {e}")
    return out


def explorer(device: str, dry: bool, say, out: Path) -> None:
    from graphopt.explorer.engine import PREDICTED_GPU, Engine
    from graphopt.explorer.plots import numbers, plot_png
    from graphopt.models import example
    for name, sizes in (("resnet18", {"size": 64 if dry else 224}),
                        ("bert", {"seq_len": 32 if dry else 128})):
        model, inputs = example(name, **sizes)
        engine = Engine(model, inputs)
        combos = {(): "capture (baseline)",
                  engine.passes[:-2]: "graph passes (before lower)",
                  engine.passes: "every stage (lower, backend)"}
        say(f"{name} {sizes}: stages timed on {device}; predicted = "
            f"{PREDICTED_GPU}, published figures, not measured")
        for combo in combos:  # one run per stage: a stage that fails on the GPU
            try:                # (a CPU library kernel bound) leaves the others
                engine.measure_all([(), combo], device,
                                   budget_s=0.05 if dry else 0.2)
                error = ""
            except Exception as e:  # noqa: BLE001 - say which stage failed, go on
                error = f"; could not run on {device}: {type(e).__name__}: {e}"
            nums = numbers(engine, combo, device)
            t, cuda = nums["time"][1], nums["cuda_peak"][1]
            cuda = "n/a" if cuda is None else f"{cuda / 2**20:.1f} MiB"
            say(f"  {combos[combo]:30} time {_fmt(t)}, predicted "
                f"{_fmt(nums['predicted'][1])}, kernels {nums['kernels'][1]}, "
                f"peak (liveness) {nums['peak_bytes'][1] / 2**20:.1f} MiB, "
                f"CUDA allocator {cuda}{error[:300]}")
        png = plot_png(numbers(engine, engine.passes, device))
        (out / f"gpu_explorer_{name}.png").write_bytes(png)


def _fmt(seconds):
    return "n/a" if seconds is None else measure.fmt_time(seconds)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("step", choices=("kernels", "graphs", "explorer"))
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device: run with --dry-run on a CPU")
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / f"gpu_{args.step}.txt"
    dry = " --dry-run" if args.dry_run else ""
    lines = [f"# benchmarks/gpu_paths.py {args.step}{dry}"
             f" on {measure.device_name(device)}, torch {torch.__version__}, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"]

    def say(text):
        print(text, flush=True)
        lines.append(text)
    say(lines.pop())
    try:
        if args.step == "kernels":
            kernels(device, args.dry_run, say)
        elif args.step == "graphs":
            graphs(device, args.dry_run, say)
        else:
            explorer(device, args.dry_run, say, args.out)
    finally:
        log.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
