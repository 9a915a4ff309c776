"""Hugging Face's EfficientNet (every conv with padding="same"): eager against graphopt.

Run:  python benchmarks/hf_efficientnet.py [--threads N] [--rounds R]
      PYTHONPATH=<another checkout>/src python benchmarks/hf_efficientnet.py
          (the same run against another version of graphopt)

EfficientNet-B0's sizes (width and depth 1.0; the config's defaults are B7's, whose
blocks give an output of zeros), convs initialised as torch initialises them
(Hugging Face's own init, normal with std 0.02, lets the activations vanish to
zeros and denormals, whose arithmetic is slow: no timing to trust), batch norms
with statistics away from (0, 1), one 224x224 image. Prints what graphopt
fused (squeeze-excite gates, conv+activation, lone convs), the largest difference
from eager, and one interleaved comparison (graphopt.measure.compare).
"""

from __future__ import annotations

import argparse

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--rounds", type=int, default=11)
    a = p.parse_args()
    import transformers

    import graphopt
    from graphopt.measure import compare

    torch.manual_seed(0)
    config = transformers.EfficientNetConfig(width_coefficient=1.0,
                                             depth_coefficient=1.0, hidden_dim=1280)
    model = transformers.EfficientNetModel(config).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Conv2d):
                m.reset_parameters()
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    x = torch.randn(1, 3, 224, 224)
    opt = graphopt.optimize(model, x).module
    kinds = [type(m).__name__ for m in opt.graph_module.modules()]
    print(f"graphopt from {graphopt.__file__}: "
          + ", ".join(f"{k} {kinds.count(k)}"
                      for k in ("SqueezeExcite", "ConvReLU", "PackedConv")))
    with torch.no_grad():
        diff = (opt(x)["last_hidden_state"] - model(x).last_hidden_state).abs().max()
        t = compare({"eager": model, "graphopt": opt}, x, rounds=a.rounds,
                    min_run_time=3.0, threads=a.threads)
    scale = model(x).last_hidden_state.abs().max().item()
    print(f"max |graphopt - eager| {diff.item():.1e} (outputs up to {scale:.2f})")
    print(t)
    print(t.verdict("eager", "graphopt"))
    print(t.conditions)


if __name__ == "__main__":
    main()
