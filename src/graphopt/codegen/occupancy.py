"""Occupancy: how many blocks of a kernel one GPU multiprocessor holds (chapter 6).

A streaming multiprocessor (SM) keeps every resident warp's registers and every
resident block's shared memory on chip at once, so a kernel that asks for more of
either leaves room for fewer warps, and fewer warps hide less memory latency. The
count is the CUDA occupancy calculator's arithmetic on the SM's published limits:

    blocks = min(warp slots, block slots, registers, shared memory)   per SM
    occupancy = blocks * warps per block / max warps per SM

Registers are handed out per warp in units of 256 (a thread's count rounded up to a
multiple of 8); since compute capability 8.0 the CUDA runtime keeps 1 KiB of shared
memory per block for itself, and shared memory is handed out in 128-byte units.
The register limit below ignores the calculator's finer per-quarter-SM rounding of
warps, which changes no case in this book (warps per block a multiple of 4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

KIB = 1024
REG_UNIT = 256          # registers are allocated per warp in units of 256
SHARED_UNIT = 128       # shared memory is allocated per block in units of 128 bytes
RESERVED_SHARED = KIB   # kept per block by the CUDA runtime (compute capability 8.0+)


@dataclass(frozen=True)
class SM:
    """One GPU's per-multiprocessor limits, as NVIDIA publishes them (ch. 6)."""

    gpu: str
    arch: str                 # "sm_80": what ahead-of-time compilation targets
    registers: int            # 32-bit registers per SM
    max_regs_per_thread: int
    max_warps: int            # resident warps per SM (max threads / 32)
    max_blocks: int           # resident blocks per SM
    shared: int               # usable shared memory per SM (largest carveout)
    shared_per_block: int     # the most one block may ask for (opt-in)
    source: str

    @property
    def max_threads(self) -> int:
        return self.max_warps * 32


# Published figures: CUDA C++ Programming Guide, "Compute Capabilities" table
# (registers, warps, blocks, shared memory per SM and per block), and the NVIDIA
# Ampere and Hopper tuning guides (A100: 192 KiB of L1 + shared per SM, of which up
# to 164 KiB shared, 163 KiB per block; H100: 256 KiB combined, up to 228 KiB shared,
# 227 KiB per block).
A100 = SM("A100", "sm_80", 65536, 255, 64, 32, 164 * KIB, 163 * KIB,
          "CUDA Programming Guide (cc 8.0); NVIDIA Ampere tuning guide")
H100 = SM("H100", "sm_90", 65536, 255, 64, 32, 228 * KIB, 227 * KIB,
          "CUDA Programming Guide (cc 9.0); NVIDIA Hopper tuning guide")
SMS = {"sm_80": A100, "sm_90": H100}


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks and warps per SM for one kernel, and what limits them (ch. 6)."""

    sm: SM
    num_warps: int
    blocks: int
    limits: dict              # limiter name -> blocks it alone would allow
    fits: bool                # False: the block asks for more than the SM has

    @property
    def warps(self) -> int:
        return self.blocks * self.num_warps

    @property
    def fraction(self) -> float:
        """Resident warps over the SM's maximum (the calculator's occupancy)."""
        return self.warps / self.sm.max_warps

    @property
    def limiter(self) -> str:
        """The resource that sets the count ("registers", "shared memory", ...)."""
        return min(self.limits, key=lambda k: (self.limits[k], k))

    def __str__(self) -> str:
        if not self.fits:
            return f"does not fit on an {self.sm.gpu} SM"
        return (f"{self.blocks} blocks, {self.warps}/{self.sm.max_warps} warps "
                f"({self.fraction:.0%}), limited by {self.limiter}")


def occupancy(sm: SM | str, num_warps: int, registers: int,
              shared: int = 0) -> Occupancy:
    """Blocks of `num_warps` warps an SM holds at `registers` per thread and
    `shared` bytes of shared memory per block (chapter 6)."""
    sm = SMS[sm] if isinstance(sm, str) else sm
    if num_warps < 1 or registers < 0 or shared < 0:
        raise ValueError("num_warps must be >= 1, registers and shared >= 0")
    fits = (num_warps <= sm.max_warps and registers <= sm.max_regs_per_thread
            and shared <= sm.shared_per_block)
    limits = {"warps": sm.max_warps // num_warps, "blocks": sm.max_blocks}
    per_warp = _round_up(max(registers, 1) * 32, REG_UNIT)
    limits["registers"] = sm.registers // (per_warp * num_warps)
    if shared:
        per_block = _round_up(shared + RESERVED_SHARED, SHARED_UNIT)
        limits["shared memory"] = sm.shared // per_block
    fits = fits and min(limits.values()) > 0  # e.g. 32 warps at 255 registers
    blocks = min(limits.values()) if fits else 0
    return Occupancy(sm, num_warps, blocks, limits, fits)


def _round_up(x: int, unit: int) -> int:
    return math.ceil(x / unit) * unit


def limits_table() -> list[dict]:
    """The published limits this module uses, one row per GPU, for chapter 6."""
    return [{"GPU": s.gpu, "target": s.arch, "registers / SM": s.registers,
             "max registers / thread": s.max_regs_per_thread,
             "max warps / SM": s.max_warps, "max threads / SM": s.max_threads,
             "max blocks / SM": s.max_blocks,
             "shared / SM (KiB)": s.shared // KIB,
             "shared / block (KiB)": s.shared_per_block // KIB, "source": s.source}
            for s in SMS.values()]
