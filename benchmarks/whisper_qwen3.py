"""A Whisper encoder and a Qwen3 LM against eager, and where their time goes (ch. 7).

Run:  python benchmarks/whisper_qwen3.py [--rounds R] [--seconds S] [--nodes N]

Both measured slower than eager once (2.1x and 1.13x, 62 held-out architectures on a
busy machine). Here both are built from small configs with random weights (no
download): a Whisper encoder (80 mel bins, 128 frames, 2 layers, d_model 128) and a
Qwen3 model (2 layers, hidden 128, 4 heads over 2 KV heads, 64 tokens, by keyword).
At ONE intra-op thread, in one process, `graphopt.measure.compare` times eager, the
captured graph (fx's forward) and `optimize(...).module` in interleaved rounds
(median and IQR, the book's spread rule); then each node of the captured and the
optimised graph is timed by `graphopt.peers.breakdown.time_nodes` (a clock per fx
node, in rounds), and the ops whose time grew most are listed, so a stage or a node
that makes the model slower is named. Ratios are of one run on this machine.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # read once, when torch loads

import argparse  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402

import graphopt  # noqa: E402
from graphopt import measure, models  # noqa: E402
from graphopt.peers.breakdown import central_run, time_nodes  # noqa: E402
from graphopt.state import flat_inputs  # noqa: E402


def whisper_encoder():
    """Whisper's encoder (two strided convs, then pre-LN blocks) and its features."""
    import transformers as tf
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    torch.manual_seed(0)
    config = tf.WhisperConfig(
        num_mel_bins=80, d_model=128, encoder_layers=2, encoder_attention_heads=4,
        encoder_ffn_dim=512, decoder_layers=2, decoder_attention_heads=4,
        decoder_ffn_dim=512, max_source_positions=64, vocab_size=1000,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    features = torch.randn(1, 80, 128, generator=torch.Generator().manual_seed(0))
    return WhisperEncoder(config).eval(), (features,), {}


def qwen3():
    """Qwen3 (RMSNorm on q and k, grouped KV heads, SwiGLU), by keyword inputs."""
    import transformers as tf
    torch.manual_seed(0)
    config = tf.Qwen3Config(
        vocab_size=1000, hidden_size=128, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        max_position_embeddings=128, use_cache=False)
    ids, mask = models.token_inputs(1000, batch=1, seq_len=64)
    return tf.Qwen3Model(config).eval(), (), {"input_ids": ids, "attention_mask": mask}


MODELS = {"whisper_encoder": whisper_encoder, "qwen3": qwen3}


def node_times(gm, flat, rounds: int):
    """Seconds per category and per op label, interquartile means over `rounds`."""
    run = central_run([time_nodes(gm, *flat) for _ in range(rounds)])
    return run.categories, run.ops


def grown(before: dict, after: dict, top: int) -> list[str]:
    """The `top` keys whose time grew most, each as 'key: before -> after us'."""
    keys = sorted(set(before) | set(after),
                  key=lambda k: before.get(k, 0.0) - after.get(k, 0.0))[:top]
    return [f"    {k:<40}{before.get(k, 0.0) * 1e6:>9.1f} us ->"
            f"{after.get(k, 0.0) * 1e6:>9.1f} us" for k in keys]


def group_inputs(gm, flat) -> dict:
    """Each generated-kernel node's module and the inputs it got in one run."""
    from graphopt.codegen.fused import GeneratedKernel
    seen = {}

    class Grab(torch.fx.Interpreter):
        def call_module(self, target, args, kwargs):
            module = self.module.get_submodule(target)
            if isinstance(module, GeneratedKernel) and not module.eager_why:
                seen[target] = (module, args)
            return super().call_module(target, args, kwargs)

    with torch.no_grad():
        Grab(gm).run(*flat)
    return seen


def kernels_vs_their_ops(gm, flat, rounds: int) -> None:
    """Each generated kernel against its own eager ops (backend "reference"), in
    interleaved rounds: a group whose kernel is slower is named."""
    for name, (module, args) in group_inputs(gm, flat).items():
        def eager(*x, module=module):
            module.backend = "reference"
            try:
                return module(*x)
            finally:
                del module.backend
        with torch.no_grad():
            c = measure.compare({"kernel": module, "its ops": eager}, *args,
                                rounds=rounds, min_run_time=0.3, threads=1)
        shape = tuple(args[0].shape) if isinstance(args[0], torch.Tensor) else "?"
        k, e = c["kernel"], c["its ops"]
        print(f"    {name:<16}{'+'.join(module.ops)[:34]:<36}{str(shape):<16}"
              f"{k.median * 1e6:>7.1f} us vs {e.median * 1e6:>6.1f} us"
              f"{'  SLOWER' if k.q1 > e.q3 else ''}")


def report(name: str, rounds: int, seconds: float, top: int) -> None:
    model, args, kwargs = MODELS[name]()
    result = graphopt.optimize(model, *args, stats=False, **kwargs)
    captured, final = result.stages[0].module, result.module
    flat = flat_inputs(captured, args, kwargs)

    def call(fn):
        return lambda *_: fn(*args, **kwargs)

    with torch.no_grad():
        timed = measure.compare({"eager": call(model), "captured": call(captured),
                                 "graphopt": call(final)},
                                rounds=rounds, min_run_time=seconds, threads=1)
    print(f"\n{name}")
    print(timed)
    print(timed.verdict("graphopt", "eager"))
    print(timed.conditions)
    cats0, ops0 = node_times(captured, flat, rounds)
    cats1, ops1 = node_times(final.graph_module, flat, rounds)
    print(f"  nodes timed one by one (interquartile mean of {rounds} calls): captured "
          f"{sum(cats0.values()) * 1e3:.2f} ms, optimised "
          f"{sum(cats1.values()) * 1e3:.2f} ms; per category, then the ops that grew:")
    print("\n".join(grown(cats0, cats1, len(cats0) + len(cats1))))
    print("\n".join(grown(ops0, ops1, top)))
    print("  each generated kernel vs its own eager ops (median; SLOWER: IQRs apart):")
    kernels_vs_their_ops(final.graph_module, flat, rounds)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--seconds", type=float, default=3.0,
                   help="total timed seconds per model (all variants)")
    p.add_argument("--nodes", type=int, default=6, help="ops listed per model")
    p.add_argument("--models", default=",".join(MODELS))
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    for name in args.models.split(","):
        report(name, args.rounds, args.seconds, args.nodes)
    return 0


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    import transformers
    transformers.logging.set_verbosity_error()
    raise SystemExit(main())
