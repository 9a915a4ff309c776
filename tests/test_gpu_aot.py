"""Kernels compiled ahead of time for an A100 and an H100, on a machine with no GPU.

Triton compiles to PTX and a cubin without a driver; the cubin's registers, shared
memory and spills are read back with the cuobjdump Triton bundles (chapter 6). The
occupancy arithmetic is checked against cases computed by hand from the published
limits (codegen/occupancy.py).
"""

import pytest
import torch
from torch import fx

from graphopt import codegen
from graphopt.codegen.occupancy import A100, H100, occupancy
from graphopt.errors import InputError

pytest.importorskip("triton")
from graphopt.codegen import aot  # noqa: E402

ARCHS = ("sm_80", "sm_90")


# --- occupancy, by hand ---------------------------------------------------------

def test_a_light_kernel_fills_the_sm():
    # 32 registers x 32 threads = 1024 per warp, 4096 per block of 4 warps:
    # 65536 / 4096 = 16 blocks = 64 warps, the SM's maximum
    occ = occupancy(A100, num_warps=4, registers=32)
    assert (occ.blocks, occ.warps, occ.fraction) == (16, 64, 1.0)


def test_registers_round_up_to_8_per_thread():
    # 47 -> 48 registers: 1536 per warp, 6144 per block; 65536 // 6144 = 10 blocks
    occ = occupancy(H100, 4, registers=47)
    assert (occ.blocks, occ.warps, occ.limiter) == (10, 40, "registers")
    assert occupancy(H100, 4, registers=48).blocks == 10
    assert occupancy(H100, 4, registers=49).blocks == 9   # 56 x 32 x 4 = 7168


def test_the_register_ceiling():
    # 255 -> 256 registers: 8192 per warp, so 8 warps per SM in all: 12.5 %
    occ = occupancy(A100, 8, registers=255)
    assert (occ.blocks, occ.warps, occ.fraction) == (1, 8, 0.125)
    # a block of 32 warps at 255 registers needs 262144 > 65536: it cannot launch
    assert not occupancy(A100, 32, registers=255).fits


def test_shared_memory_limits_with_the_reserved_kilobyte():
    # 100 KiB + 1 KiB reserved = 103424 B per block; H100: 228 KiB = 233472 B -> 2
    occ = occupancy(H100, 4, registers=32, shared=100 * 1024)
    assert (occ.blocks, occ.limiter) == (2, "shared memory")
    # A100: 164 KiB = 167936 B -> 1 block
    assert occupancy(A100, 4, registers=32, shared=100 * 1024).blocks == 1
    # 80 registers (10240 per block: 6 blocks) against 16 KiB (+1: 9 blocks)
    occ = occupancy(A100, 4, registers=80, shared=16 * 1024)
    assert (occ.blocks, occ.limiter) == (6, "registers")


def test_a_block_larger_than_the_sm_does_not_fit():
    occ = occupancy(A100, 4, registers=32, shared=200 * 1024)   # > 163 KiB
    assert not occ.fits and occ.blocks == 0 and "does not fit" in str(occ)
    assert occupancy(H100, 4, registers=32, shared=200 * 1024).fits  # <= 227 KiB


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        occupancy(A100, 0, registers=32)


# --- the chapter's three kernel kinds, compiled for both targets ------------------

@pytest.fixture(scope="module")
def elementwise():
    gm = fx.symbolic_trace(lambda x: torch.abs(torch.relu(x * 1.5 + 0.5) - 0.25))
    return codegen.compile_group(gm, (torch.randn(4096),), backend="triton")


@pytest.fixture(scope="module")
def softmax():
    gm = fx.symbolic_trace(lambda x: torch.softmax(x * 0.125, -1))
    return codegen.compile_group(gm, (torch.randn(8, 1024),), backend="triton")


@pytest.fixture(scope="module")
def matmul():
    from graphopt.backend import patterns_triton
    return aot.jit_from_file(patterns_triton.__file__, "matmul_act_kernel")


def compile_matmul(fn, arch, tile):
    return aot.compile_kernel(
        fn, arch, types={"lo": "fp32", "hi": "fp32"},
        constexprs={"HAS_BIAS": True, "ACT": 1, "BLOCK_M": tile, "BLOCK_N": tile,
                    "BLOCK_K": 32, "sak": 1, "sbn": 1, "scn": 1},
        multiples_of_16=("M", "N", "K", "sam", "sbk", "scm"))


@pytest.mark.parametrize("arch", ARCHS)
def test_elementwise_needs_registers_only(elementwise, arch):
    small = aot.compile_group(elementwise, arch, block=1024)
    large = aot.compile_group(elementwise, arch, block=4096)
    for k in (small, large):
        assert set(k.asm) == {"ttir", "ttgir", "llir", "ptx"} and k.cubin
        assert k.resources.arch == arch and k.resources.shared == 0
        assert k.resources.spill == 0 and 0 < k.resources.registers <= 255
        assert k.resources.constant > 0             # the arguments
    # 4x the lanes per thread: more values held at once
    assert large.resources.registers > small.resources.registers
    assert "ld.global.v4" in small.asm["ptx"]       # 16-byte loads: n % 16 == 0
    assert "ld.global" in small.ptx_excerpt()
    assert f".target {arch}" in small.asm["ptx"]


@pytest.mark.parametrize("arch", ARCHS)
def test_row_softmax_meets_in_shared_memory(softmax, arch):
    k = aot.compile_group(softmax, arch, block=1024)
    # tl.max and tl.sum across the block: the warps exchange values in shared memory
    assert k.resources.shared > 0 and k.resources.registers > 0
    assert "bar.sync" in k.asm["ptx"] or "barrier" in k.asm["ptx"]
    occ = k.resources.occupancy()
    assert occ.fits and 0 < occ.fraction <= 1


@pytest.mark.parametrize("arch", ARCHS)
def test_matmul_shared_memory_grows_with_the_tile(matmul, arch):
    small, large = compile_matmul(matmul, arch, 32), compile_matmul(matmul, arch, 64)
    # the A and B tiles of each pipeline stage live in shared memory
    assert large.resources.shared > small.resources.shared >= 2 * 32 * 32 * 4
    assert large.resources.registers > small.resources.registers
    assert "cp.async" in small.asm["ptx"]          # global -> shared, asynchronously
    assert small.resources.occupancy().blocks > large.resources.occupancy().blocks


def test_compiles_under_the_interpreter_too(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")    # the tests' and --dry-run's mode
    source = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
              "def kernel(in0, out0, n, BLOCK: tl.constexpr):\n"
              "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
              "    tl.store(out0 + offs, tl.load(in0 + offs, mask=offs < n) * 2.0,"
              " mask=offs < n)\n")
    fn = aot.jit_from_source(source)
    k = aot.compile_kernel(fn, "sm_90", constexprs={"BLOCK": 256})
    assert k.resources.registers > 0


def test_clear_errors(elementwise):
    fn = aot.jit_from_source(elementwise.source)
    with pytest.raises(InputError, match="sm_80"):
        aot.compile_kernel(fn, "sm_75", constexprs={"BLOCK": 256})
    with pytest.raises(InputError, match="BLOCK"):
        aot.compile_kernel(fn, "sm_90", constexprs={})


def test_the_memory_hierarchy_figure_gives_published_gpu_figures():
    from graphopt import viz
    source = viz.memory_hierarchy().source
    # an H100 SM: up to 228 KiB of shared memory at about 30 cycles; L2 200+ cycles
    assert "228 KiB (H100)" in source and "~30 cycles" in source
    assert "164 KiB (A100)" in source and "200+ cycles" in source
    assert "tens of KiB, a few cycles" not in source   # the old, wrong GPU figure
