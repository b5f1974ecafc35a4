"""Profiling mode's harness (provided, not an exercise): the records, the profile a ``with profile_npu()``
block collects, the simulator that loads programs profiled, and the per-op table.

How the pieces fit (your part is :mod:`lab02_npu_backend.profiling`)::

    from lab02_npu_backend.given.registration import npu_simulator   # the backend "npu_simulator" names
    compiled = torch.compile(model, backend=npu_simulator, options={"profile": True})
    with profile_npu() as profile, torch.profiler.profile() as trace:
        compiled(x)
    print(profile.table())                    # time, bytes and FLOPs per ISA op
    trace.export_chrome_trace("trace.json")   # open in https://ui.perfetto.dev: npu:<program> scopes

``options={"profile": True}`` makes the backend compile as usual, then hand every NPU partition a
:class:`ProfilingSimulator`: it validates each program with your simulator (its rules stand), then
runs it as your :class:`~lab02_npu_backend.profiling.ProfiledProgram`, one timed instruction at a time.
The unprofiled run loop stays as fast as it was: profiling costs nothing unless asked for.

What runs inside a ``with profile_npu()`` block is recorded into its :class:`NpuProfile`; a profiled
program run outside any block records nothing, but still shows its scopes to ``torch.profiler``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from lab02_npu_backend.given import flops
from lab02_npu_backend.given.isa import Isa
from labkit.impl import load_lab

PACKAGE = "lab02_npu_backend"
#: The options ``torch.compile(..., backend=npu_simulator, options=...)`` accepts.
BACKEND_OPTIONS = ("profile",)
#: FLOPs per element of the first operand for the ISA's fused ops: the cost model of
#: :mod:`lab02_npu_backend.given.flops`, which coverage by FLOPs uses, so both count alike.
FUSED_FLOPS_PER_ELEMENT: dict[str, int] = {
    "softmax": flops.FLOPS_PER_ELEMENT[torch.ops.aten._softmax],
    "layernorm": flops.FLOPS_PER_ELEMENT[torch.ops.aten.native_layer_norm],
    "rmsnorm": flops.FLOPS_PER_ELEMENT[torch.ops.aten._fused_rms_norm],
}
#: The ISA ops that only move data: they compute nothing (0 FLOPs), but they still read and write memory.
DATA_MOVEMENT_OPS = frozenset({"reshape", "permute", "slice", "concat", "expand"})


@dataclass(frozen=True)
class InstructionRecord:
    """One instruction's run: which program and instruction, how long its kernel took, what it moved."""

    program: str
    index: int  # the instruction's position in the program
    op: str
    seconds: float
    bytes_read: int
    bytes_written: int
    flops: int


@dataclass(frozen=True)
class OpRow:
    """One row of the per-op table: every run of one ISA op, summed."""

    op: str
    calls: int
    seconds: float
    share: float  # of the profile's total instruction time, 0 to 1
    bytes_moved: int  # read + written
    flops: int

    @property
    def gigabytes_per_second(self) -> float:
        return self.bytes_moved / self.seconds / 1e9 if self.seconds else 0.0

    @property
    def gflops_per_second(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds else 0.0

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved (the roofline's x axis): low means memory-bound, high compute-bound."""
        return self.flops / self.bytes_moved if self.bytes_moved else 0.0


@dataclass
class NpuProfile:
    """The instructions run inside one ``with profile_npu()`` block, in the order they ran."""

    records: list[InstructionRecord] = field(default_factory=list)

    def by_op(self) -> list[OpRow]:
        """The per-op table's rows (your :func:`~lab02_npu_backend.profiling.op_rows`)."""
        return load_lab(PACKAGE).op_rows(self.records)

    def table(self) -> str:
        """The per-op table as Markdown, slowest op first."""
        return format_table(self.by_op())

    def as_dict(self) -> dict[str, Any]:
        """Every record and every row, for JSON."""
        rows = [asdict(row) | {"intensity": row.intensity} for row in self.by_op()]
        return {"records": [asdict(record) for record in self.records], "by_op": rows}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)


_ACTIVE: ContextVar[NpuProfile | None] = ContextVar("npu_profile", default=None)


@contextlib.contextmanager
def profile_npu() -> Iterator[NpuProfile]:
    """Record every profiled NPU program run inside the block (blocks nest: the innermost records)."""
    profile = NpuProfile()
    token = _ACTIVE.set(profile)
    try:
        yield profile
    finally:
        _ACTIVE.reset(token)


def active_profile() -> NpuProfile | None:
    """The profile of the innermost ``with profile_npu()`` block, or None outside every block."""
    return _ACTIVE.get()


class ProfilingSimulator:
    """A simulator that validates programs with ``simulator`` and runs them profiled.

    Args:
        simulator: the simulator the partition was given (your :class:`NpuSimulator`): its ``load``
            validates each program, so a program it rejects is rejected here too.
        profiled_program: the class that runs a validated program profiled,
            ``profiled_program(program, isa)(*inputs) -> outputs``.
    """

    def __init__(self, simulator: Any, profiled_program: type) -> None:
        self.simulator = simulator
        self.isa: Isa = simulator.isa
        self.profiled_program = profiled_program
        self.programs: list[dict[str, Any]] = []  # every program loaded, in order (tests compare records to them)

    def load(self, program: Any) -> Any:
        self.simulator.load(program)  # raises ProgramError, naming the instruction, for an invalid program
        self.programs.append(program)
        return self.profiled_program(program, self.isa)

    def validate(self, program: Any) -> None:
        self.simulator.validate(program)

    def run(self, program: Any, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return self.load(program)(*inputs)


def profile_partitions(compiled: Any, profiled_program: type) -> list[ProfilingSimulator]:
    """Give every NPU partition of ``compiled`` (a module whose submodules have ``simulator`` and
    ``program_name``, as :class:`NpuPartition` does) a :class:`ProfilingSimulator`; return them.

    Call it before the first run: a partition caches the programs it has loaded.
    """
    if not isinstance(compiled, nn.Module):
        return []
    profiled = []
    for module in compiled.modules():
        if hasattr(module, "simulator") and hasattr(module, "program_name"):
            module.simulator = ProfilingSimulator(module.simulator, profiled_program)
            profiled.append(module.simulator)
    return profiled


def backend_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` checked: a mapping whose keys are all in :data:`BACKEND_OPTIONS`, else a ``ValueError``
    naming the unknown ones (a misspelt ``"profle"`` must not silently profile nothing)."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(BACKEND_OPTIONS))
    if unknown:
        raise ValueError(f"unknown npu_simulator option(s) {unknown}; the backend knows {list(BACKEND_OPTIONS)}")
    return options


def format_table(rows: Sequence[OpRow]) -> str:
    """The per-op table as Markdown: calls, time and its share, bytes moved, FLOPs, and what they give."""
    lines = [
        "| op | calls | time (ms) | share | MB moved | MFLOP | GB/s | GFLOP/s | FLOP/byte |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.op} | {row.calls} | {row.seconds * 1e3:.3f} | {row.share:.1%} | {row.bytes_moved / 1e6:.3f} | "
            f"{row.flops / 1e6:.3f} | {row.gigabytes_per_second:.2f} | {row.gflops_per_second:.2f} | "
            f"{row.intensity:.2f} |"
        )
    return "\n".join(lines)
