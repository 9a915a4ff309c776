"""The peers graphopt is measured against: eager, torch.compile, ONNX Runtime (ch. 7).

Every variant of a model becomes a plain callable on the same inputs, so one timing
loop serves them all:

    eager               the model itself, op by op
    graphopt            graphopt.optimize(model, *inputs).module
    inductor            torch.compile(model)
    inductor_freezing   torch.compile with inductor's freezing: weights become
                        constants, BN folded, conv weights prepacked (blocked layout)
    ort                 torch.onnx.export(..., dynamo=True) + an ONNX Runtime session
                        with every graph optimisation (ORT_ENABLE_ALL)

Two measuring pitfalls decide the shape of this package (TOOLCHAIN.md):

- a freezing compile made after a plain compile in the same process ran at the plain
  one's speed. So `Worker` builds ONE variant in its OWN process (spawned, not forked)
  and times it when asked; the parent asks each worker in turn, round after round, so
  the variants are interleaved while none shares a process with another;
- idle threads either sleep at once, paying a wake-up per parallel region, or spin
  and steal the cores from whatever runs next (ONNX Runtime's spin for tens of
  milliseconds after a run): `waiting.py` sets one policy for torch and ORT alike,
  by default a bounded spin, and `interleave` pauses between variants.

All variants get the same intra-op thread count (`threads`), stated by `info()`.

One file per concept:

    errors.py     PeerError
    quiet.py      hide exporter and compiler chatter
    ort.py        ONNX export, ONNX Runtime sessions, the ops ORT's optimiser leaves
    inductor.py   torch.compile, with or without freezing
    variants.py   VARIANTS and build(): one variant as a warmed-up callable
    worker.py     Worker: one variant built and timed in its own process
    rounds.py     interleave(): rounds of every variant in turn, Measured
    waiting.py    WAIT_POLICIES: how idle threads wait (bounded spin, passive, active)
"""

from .errors import PeerError
from .inductor import compiled
from .ort import (
    ORT_LEVELS,
    OrtModel,
    export_onnx,
    onnx_runtime,
    optimized_op_counts,
    ort_session,
    ort_version,
)
from .rounds import Measured, interleave
from .variants import VARIANTS, build, flat_tensors, time_calls
from .waiting import SETTLE_S, WAIT_POLICIES
from .worker import Worker

__all__ = ["Measured", "ORT_LEVELS", "OrtModel", "PeerError", "SETTLE_S", "VARIANTS",
           "WAIT_POLICIES", "Worker",
           "build", "compiled", "export_onnx", "flat_tensors", "interleave",
           "onnx_runtime", "optimized_op_counts", "ort_session", "ort_version",
           "time_calls"]
