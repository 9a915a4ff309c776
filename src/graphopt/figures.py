"""Concept figures: pictures of ideas, not of a graph (chapters 1 and 2).

`memory_hierarchy()` shows why fusion saves memory traffic, `launch_timeline()` why
launch overhead matters; `viz.py` re-exports both, as the chapters call them. Their
words follow GRAPHOPT_LANG (graphopt.i18n). The Chinese book's saved SVG of the
hierarchy is the English one with each line of text translated in place
(tools/i18n/outputs.py), so each line is one message.
"""

from __future__ import annotations

from .drawing import Drawing
from .i18n import N_, _, figure_language, gettext_in

# (name, a CPU core's level, a GPU's level): size and time per access of each, since
# the two differ by an order of magnitude at the same level. Sizes are published
# figures (NVIDIA's A100 and H100 whitepapers and tuning guides; x86 vendors'
# optimisation manuals); latencies are rounded from published microbenchmarks
# (Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking",
# 2018, and its Turing/Ampere sequels; Luo et al., "Benchmarking and Dissecting the
# Nvidia Hopper GPU Architecture", 2024): an H100's shared memory answers in about 30
# cycles, its L2 in 200+, its HBM in several hundred.
_LEVELS = [
    (N_("registers"), N_("a few KiB per core, 1 cycle"),
     N_("64K x 32 bit = 256 KiB per SM (255 per thread), 1 cycle")),
    (N_("L1 / shared memory"), N_("L1: 32-48 KiB per core, ~5 cycles"),
     N_("shared: up to 164 KiB (A100) / 228 KiB (H100) per SM, ~30 cycles")),
    (N_("L2 (and L3) cache"),
     N_("L2: 1-2 MiB per core, ~15 cycles; L3: tens of MiB, 40-70"),
     N_("L2: 40 MiB (A100) / 50 MiB (H100) per GPU, 200+ cycles")),
    (N_("main memory"), N_("DRAM: GiB, ~100 ns (hundreds of cycles)"),
     N_("HBM: 40-80 GiB, 2-3.35 TB/s, 400+ cycles")),
]


def memory_hierarchy() -> Drawing:
    """The memory hierarchy as a figure (chapter 1): fused kernels keep intermediates
    in the top levels; an unfused operator sends each result to the bottom one."""
    title = (_("the memory hierarchy: small and fast at the top, big and slow below")
             + "\\n"
             + _("(sizes: published figures; cycles: published microbenchmarks)"))
    dot = Drawing(name=_("the memory hierarchy"), graph_attr={"bgcolor": "transparent",
        "rankdir": "TB", "fontname": "Helvetica", "nodesep": "0.3", "ranksep": "0.25",
        "label": title, "labelloc": "t", "fontsize": "12"},
        node_attr={"shape": "box", "style": "filled", "fontname": "Helvetica",
                   "fontsize": "10", "fillcolor": "#eef3fb", "color": "#2b6cb0"})
    for i, (name, cpu, gpu) in enumerate(_LEVELS):
        width = f"{2.2 + 1.3 * i:.1f}"  # wider = bigger
        dot.node(f"level{i}", f"{_(name)}\\nCPU: {_(cpu)}\\nGPU: {_(gpu)}",
                 width=width, fixedsize="false")
        if i:
            dot.edge(f"level{i - 1}", f"level{i}", dir="both", color="#888888",
                     arrowsize="0.6")
    dot.node("fused", _("a fused kernel:") + "\\n" + _("intermediates stay up here"),
             shape="note", fillcolor="#cfe8cf", color="#555555")
    dot.node("unfused", _("unfused operators:") + "\\n"
             + _("every result goes down and back"), shape="note",
             fillcolor="#f6c6c6", color="#555555")
    dot.edge("fused", "level0", style="dashed", arrowhead="none")
    dot.edge("unfused", f"level{len(_LEVELS) - 1}", style="dashed", arrowhead="none")
    with dot.subgraph() as same:
        same.attr(rank="same")
        same.node("fused")
        same.node("level0")
    return dot


def launch_timeline(eager_kernels: int, fused_kernels: int, host_us: float = 5.0,
                    kernel_us: float = 3.0):
    """Schematic CPU -> GPU timeline (chapter 2): the host queues launches, the GPU
    runs them; when a launch costs more host time than the kernel takes, the GPU
    idles between kernels. The fused graph does the same work in fewer, longer
    kernels. Not a measurement: the durations are parameters."""
    import matplotlib
    import matplotlib.pyplot as plt

    lang, font = figure_language()
    fonts = {"font.family": [font, "DejaVu Sans"]} if font else {}
    with matplotlib.rc_context(fonts):  # text made here keeps the CJK font
        return _timeline(plt, lang, eager_kernels, fused_kernels, host_us, kernel_us)


def _timeline(plt, lang: str, eager_kernels: int, fused_kernels: int, host_us: float,
              kernel_us: float):
    fig, axes = plt.subplots(2, 1, figsize=(8, 3.2), sharex=True)
    total = eager_kernels * host_us + kernel_us
    work = eager_kernels * kernel_us  # the same arithmetic, however it is split
    for ax, (label, n) in zip(axes, [(gettext_in(lang, "eager"), eager_kernels),
                                     (gettext_in(lang, "fused graph"),
                                      fused_kernels)]):
        gpu_free, each = 0.0, work / n
        for k in range(n):
            start = k * host_us
            ax.broken_barh([(start, host_us * 0.9)], (1, 0.8), color="#fde2b8")
            run = max(start + host_us, gpu_free)  # a kernel starts once queued
            ax.broken_barh([(run, each * 0.95)], (0, 0.8), color="#f6c6c6")
            gpu_free = run + each
        busy = work / gpu_free
        ax.set_yticks([0.4, 1.4], ["GPU", "CPU"])
        ax.set_title(gettext_in(lang, "{label}: {n} launches, GPU busy {busy} of the "
                                "time").format(label=label, n=n, busy=f"{busy:.0%}"),
                     fontsize=10, loc="left")
        ax.set_xlim(0, total * 1.05)
    axes[-1].set_xlabel(gettext_in(
        lang, "time (µs; schematic: {host} µs host work per launch, {kernel} µs per "
        "eager kernel)").format(host=f"{host_us:g}", kernel=f"{kernel_us:g}"))
    fig.tight_layout()
    return fig
