"""The book's performance model: a time predicted from counts (chapter 6).

A kernel cannot finish before its bytes have crossed the memory bus, nor before its
FLOPs have gone through the arithmetic units, and every kernel pays a fixed cost to
start. So the model predicts, for one kernel,

    time = max(bytes / bandwidth, FLOPs / peak) + launch

and for a run of a graph it adds the nodes up, with one more fixed cost for each
kernel a framework dispatches from Python (finding the op, checking its arguments,
allocating its output). On a CPU the two costs add up, one after the other. A GPU
runs asynchronously: the host queues kernels while the device runs earlier ones, so
a run takes whichever is longer, the host's dispatching or the device's work:

    CPU:  sum(roof + launch) + kernels x dispatch
    GPU:  max(sum(roof + launch), kernels x dispatch)     # launch-bound when small

Every input is a count the book computes exactly (bytes and kernels from
`graphopt.run`, FLOPs from `graphopt.flops`) or a limit of the machine: measured on
this CPU by `this_cpu()` (copy bandwidth, matmul throughput, the fixed cost of one
op), or a GPU's published figures (`H100`, `A100`), labelled as such. The model is
wrong in known ways, and chapter 6 shows where: data that fits in a cache moves
faster than the memory roof; a fresh output pays page faults the copy roof never
paid; a kernel that needs two passes over its data (softmax) moves more bytes than
its inputs and outputs. XLA's GPU performance model and inductor's runtime estimates
decide fusion with the same ingredients.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from ..costs import NodeStats, Report
from ..errors import InputError
from ..i18n import N_, _, pgettext
from ..ops import flops as node_flops


@dataclass(frozen=True)
class Machine:
    """The limits the model needs: two roofs and two fixed costs."""

    name: str
    bandwidth_gbps: float   # memory roof: bytes read + written per second (1e9)
    peak_gflops: float      # compute roof: float32 FLOPs per second (1e9)
    launch_us: float        # fixed cost of starting one kernel on the device
    dispatch_us: float      # host's fixed cost of one op called from Python
    asynchronous: bool      # True on a GPU: host and device overlap
    origin: str             # "measured" (on this machine) or "published"
    note: str = ""          # where the figures come from

    def __str__(self) -> str:
        return _("{name} ({origin}): {bandwidth} GB/s, {peak} GFLOP/s, launch "
                 "{launch} µs, dispatch {dispatch} µs per op").format(
            name=self.name, origin=_origin(self.origin),
            bandwidth=f"{self.bandwidth_gbps:.3g}", peak=f"{self.peak_gflops:.3g}",
            launch=f"{self.launch_us:.2g}",
            dispatch=f"{self.dispatch_us:.2g}")


# Published figures (NVIDIA's data sheets, SXM parts, float32 without tensor
# cores: torch's default for float32 matmul). The fixed costs are nominal, not
# published: a CUDA launch takes a few microseconds of device time, and one eager
# PyTorch op costs the host about as much as it does on a CPU.
H100 = Machine("NVIDIA H100 SXM", bandwidth_gbps=3350, peak_gflops=67_000,
               launch_us=2.5, dispatch_us=5.0, asynchronous=True,
               origin="published",
               note="data sheet: HBM3 3.35 TB/s, FP32 67 TFLOPS; fixed: nominal")
A100 = Machine("NVIDIA A100 SXM 80GB", bandwidth_gbps=2039, peak_gflops=19_500,
               launch_us=2.5, dispatch_us=5.0, asynchronous=True,
               origin="published",
               note="data sheet: HBM2e 2.04 TB/s, FP32 19.5 TFLOPS; fixed: nominal")
GPUS = {"H100": H100, "A100": A100}


@dataclass(frozen=True)
class Prediction:
    """A predicted time and what it is made of (seconds)."""

    memory_s: float     # bytes over bandwidth
    compute_s: float    # FLOPs over peak
    launch_s: float     # the device's fixed cost, all kernels
    dispatch_s: float   # the host's fixed cost, all kernels
    asynchronous: bool  # host and device overlap (a GPU)

    @property
    def device_s(self) -> float:
        """What the device spends: the higher roof, plus its launches."""
        return max(self.memory_s, self.compute_s) + self.launch_s

    @property
    def seconds(self) -> float:
        """The predicted time: device and host one after the other on a CPU,
        side by side on a GPU (the longer one sets the pace)."""
        if self.asynchronous:
            return max(self.device_s, self.dispatch_s)
        return self.device_s + self.dispatch_s

    @property
    def bound(self) -> str:
        """Which term sets the time: 'memory', 'compute' or 'fixed cost'."""
        roof = max(self.memory_s, self.compute_s)
        if self.seconds - roof > roof:
            return "fixed cost"
        return "memory" if self.memory_s >= self.compute_s else "compute"

    def __str__(self) -> str:
        fixed = self.seconds - max(self.memory_s, self.compute_s)
        return _("predicted {time} ({bound}: memory {memory}, compute {compute}, "
                 "fixed {fixed})").format(
            time=_us(self.seconds), bound=_(BOUNDS[self.bound]),
            memory=_us(self.memory_s), compute=_us(self.compute_s), fixed=_us(fixed))


# what sets a predicted time, as a table's words (Prediction.bound stays the key)
BOUNDS = {"memory": N_("memory-bound"), "compute": N_("compute-bound"),
          "fixed cost": N_("fixed cost-bound")}


def _origin(origin: str) -> str:
    """A Machine's origin for the reader (the field stays the English key)."""
    return {"measured": pgettext("machine", "measured"),
            "published": pgettext("machine", "published")}.get(origin, origin)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.3g} µs"


def predict(machine: Machine, *, flops: float = 0, nbytes: float = 0,
            kernels: int = 1) -> Prediction:
    """Predicted time of `kernels` kernels that together do `flops` and move
    `nbytes`: the roofline plus the fixed costs."""
    if min(flops, nbytes, kernels) < 0:
        raise InputError("predict: flops, nbytes and kernels must be >= 0.")
    return Prediction(memory_s=nbytes / (machine.bandwidth_gbps * 1e9),
                      compute_s=flops / (machine.peak_gflops * 1e9),
                      launch_s=kernels * machine.launch_us * 1e-6,
                      dispatch_s=kernels * machine.dispatch_us * 1e-6,
                      asynchronous=machine.asynchronous)


@dataclass
class StagePrediction:
    """A graph's run predicted node by node: `nodes[name]`, and the total.

    Each node is held to its own roof (a memory-bound node never hides behind a
    compute-bound one), and on a GPU the host's dispatching of the whole run
    overlaps the device's work on the whole run."""

    machine: Machine
    nodes: dict[str, Prediction] = field(default_factory=dict)

    @property
    def device_s(self) -> float:
        return sum(p.device_s for p in self.nodes.values())

    @property
    def host_s(self) -> float:
        return sum(p.dispatch_s for p in self.nodes.values())

    @property
    def seconds(self) -> float:
        if self.machine.asynchronous:
            return max(self.device_s, self.host_s)
        return self.device_s + self.host_s

    @property
    def bound(self) -> str:
        """'memory', 'compute' or 'fixed cost': the largest share of the total."""
        memory = sum(p.memory_s for p in self.nodes.values()
                     if p.memory_s >= p.compute_s)
        compute = sum(p.compute_s for p in self.nodes.values()
                      if p.compute_s > p.memory_s)
        fixed = self.seconds - memory - compute
        parts = {"memory": memory, "compute": compute, "fixed cost": fixed}
        return max(parts, key=parts.get)

    def __str__(self) -> str:
        return _("predicted {time} on {name} ({origin}, {bound}): device "
                 "{device}, host {host}").format(
            time=_us(self.seconds), name=self.machine.name,
            origin=_origin(self.machine.origin), bound=_(BOUNDS[self.bound]),
            device=_us(self.device_s), host=_us(self.host_s))


def predict_run(machine: Machine, gm: torch.fx.GraphModule,
                report: Report) -> StagePrediction:
    """Predict each node that ran in `report` (= graphopt.run(gm, ...)) from the
    bytes and kernels it recorded and the FLOPs `graphopt.flops` counts."""
    nodes = {n.name: n for n in gm.graph.nodes}
    stage = StagePrediction(machine)
    for stats in report.nodes:
        node = nodes.get(stats.name)
        work = node_flops(node) if node is not None else 0
        stage.nodes[stats.name] = predict_node(machine, stats, work)
    return stage


def predict_node(machine: Machine, stats: NodeStats, flops: float) -> Prediction:
    """One node: its recorded bytes and kernels, its FLOPs."""
    return predict(machine, flops=flops,
                   nbytes=stats.bytes_read + stats.bytes_written,
                   kernels=stats.kernels)


@functools.lru_cache(maxsize=4)
def this_cpu(threads: int | None = None) -> Machine:
    """This CPU's limits, measured once per process and thread count: copy
    bandwidth, matmul throughput, and the fixed cost of one op (a 16-element
    `torch.add` into a preallocated output: no bytes to speak of, all overhead).
    A CPU kernel starts as a function call, so its launch cost is in that figure."""
    from .conditions import device_name, load_average
    from .limits import copy_bandwidth, matmul_gflops
    from .thread_count import threads as threads_ctx
    from .timing import time_fn

    with threads_ctx(threads):
        bandwidth = copy_bandwidth(numel=1 << 24, min_run_time=0.2).gbps
        peak = matmul_gflops(n=512, min_run_time=0.2)
        a, b, out = torch.ones(16), torch.ones(16), torch.empty(16)
        op = time_fn(lambda: torch.add(a, b, out=out), min_run_time=0.1)
        name = device_name()
    load = load_average()
    # under load the best run is starved too: say so, a prediction inherits it
    under = f", load {load:.1f} while measured" if load is not None else ""
    return Machine(name, bandwidth_gbps=bandwidth, peak_gflops=peak,
                   launch_us=0.0, dispatch_us=op.best * 1e6, asynchronous=False,
                   origin="measured",
                   note="copy of 64 MiB, 512x512 matmul, 16-element add: best runs"
                        + under)


def error_verdict(predicted: float, measured: float, tolerance: float = 1.5) -> str:
    """How the measurement compares with the prediction, in words: within
    `tolerance` times either way it 'agrees'; otherwise it says which way."""
    if predicted <= 0 or measured <= 0:
        raise InputError("error_verdict: both times must be positive.")
    ratio = measured / predicted
    times = f"{ratio:.2f}x"
    if 1 / tolerance <= ratio <= tolerance:
        return _("measured {ratio} the prediction: the model agrees").format(
            ratio=times)
    if ratio > 1:
        return _("measured {ratio} the prediction: slower than the model says"
                 ).format(ratio=times)
    return _("measured {ratio} the prediction: faster than the model says").format(
        ratio=times)
