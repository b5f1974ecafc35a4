"""Extension: profiling mode. Time every NPU instruction, count the bytes it moves and the FLOPs it does.

A coverage report says *where* each op ran; a profile says *what it cost*. On a real accelerator the
vendor's profiler (Nsight, Neuron's, a TPU's) shows a timeline of kernels: this step builds that for
the simulated NPU, in the three pieces every profiler has:

- **A timer around each kernel.** :class:`ProfiledProgram` runs a program one instruction at a time
  and times each kernel call with ``time.perf_counter`` (on CPU tensors a kernel has finished when it
  returns; on a GPU the timer would need ``torch.cuda.synchronize()`` or CUDA events, since kernels
  launch asynchronously).
- **A cost model.** Time alone does not say whether an op is slow because it computes much or because
  it moves much. :func:`instruction_traffic` counts bytes, :func:`instruction_flops` FLOPs; their
  ratio (FLOPs per byte, the roofline's *arithmetic intensity*) tells memory-bound ops (elementwise,
  layout: well under 1) from compute-bound ones (a large matmul: tens to hundreds).
- **Scopes other tools can read.** Each program runs inside ``torch.profiler.record_function(
  "npu:<program name>")`` and each instruction inside ``record_function("npu.<op>")``: a
  ``torch.profiler`` trace then shows the NPU partitions between the CPU ops that fell back, and
  ``export_chrome_trace`` writes a file Perfetto (https://ui.perfetto.dev) or ``chrome://tracing`` opens.

Profiling must not change the answer: the profiled run calls the same kernels (:data:`KERNELS`) on
the same values in the same order as the simulator, so its outputs are bit-for-bit the simulator's.
It is a second, slower run loop on purpose: the simulator's loop (step 1) stays free of timing code,
so profiling costs nothing unless it is asked for.

The cost model (the NPU has no views: every instruction reads its operands and writes its result whole):

- **bytes**: each tensor operand's ``nbytes`` read (each tensor of a list too; scalars and omitted
  operands move nothing), the result's ``nbytes`` written;
- **FLOPs**, as :mod:`lab02_npu_backend.given.flops` counts them (2 per multiply-add):
  ``matmul`` ``2 * result.numel() * K`` (K: ``a``'s last dimension); ``conv2d``
  ``2 * result.numel() * (weight.numel() / out_channels)`` (the bias is not counted, as PyTorch's
  ``FlopCounterMode`` does not); ``add``, ``mul``, ``rsqrt``, ``activation``: one per result element;
  ``mean``: one per input element; ``softmax``, ``layernorm``, ``rmsnorm``: their
  :data:`~lab02_npu_backend.given.profiling_tools.FUSED_FLOPS_PER_ELEMENT` per input element; the
  data-movement ops (:data:`~lab02_npu_backend.given.profiling_tools.DATA_MOVEMENT_OPS`): 0.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from lab02_npu_backend.given.ir import Program, ProgramError, instruction_label
from lab02_npu_backend.given.isa import Isa
from lab02_npu_backend.given.profiling_tools import (
    DATA_MOVEMENT_OPS,
    FUSED_FLOPS_PER_ELEMENT,
    InstructionRecord,
    OpRow,
    active_profile,
)

from .simulator import KERNELS

#: ISA ops that do one FLOP per element of their result.
_ELEMENTWISE = frozenset({"add", "mul", "rsqrt", "activation"})


def _tensors(operands: Sequence[Any]) -> Iterable[torch.Tensor]:
    for operand in operands:
        if isinstance(operand, torch.Tensor):
            yield operand
        elif isinstance(operand, (list, tuple)):
            yield from (each for each in operand if isinstance(each, torch.Tensor))


def instruction_traffic(operands: Sequence[Any], result: torch.Tensor) -> tuple[int, int]:
    """(bytes read, bytes written) of one instruction: its tensor operands (and the tensors of a list
    operand) read whole, its result written whole; scalars and ``None`` move nothing."""
    return sum(tensor.nbytes for tensor in _tensors(operands)), result.nbytes


def instruction_flops(op: str, operands: Sequence[Any], attrs: dict[str, Any], result: torch.Tensor) -> int:
    """The FLOPs of one instruction of ISA op ``op`` (the module docstring's cost model)."""
    if op == "matmul":
        return 2 * result.numel() * operands[0].shape[-1]
    if op == "conv2d":
        weight = operands[1]
        return 2 * result.numel() * (weight.numel() // weight.shape[0])
    if op in _ELEMENTWISE:
        return result.numel()
    if op == "mean":
        return operands[0].numel()
    if op in FUSED_FLOPS_PER_ELEMENT:
        return FUSED_FLOPS_PER_ELEMENT[op] * operands[0].numel()
    if op in DATA_MOVEMENT_OPS:
        return 0
    raise ValueError(f"no FLOP count for ISA op {op!r}")


class ProfiledProgram:
    """A validated program run one timed instruction at a time: ``profiled(*inputs) -> outputs``.

    Each run records one :class:`~lab02_npu_backend.given.profiling_tools.InstructionRecord` per instruction
    into the active profile (:func:`~lab02_npu_backend.given.profiling_tools.active_profile`; none outside a
    ``with profile_npu()`` block), inside ``record_function`` scopes for ``torch.profiler``.

    Args:
        program: a program the simulator has validated.
        isa: the ISA it was validated against (its attribute defaults fill in omitted attributes).
    """

    def __init__(self, program: Program, isa: Isa) -> None:
        self.program = program
        self.name = program["name"]
        self._steps = [
            (
                index,
                instruction_label(index, instruction),
                instruction["op"],
                KERNELS[instruction["op"]],
                {a.name: a.default for a in isa[instruction["op"]].attributes.values()} | instruction["attrs"],
                len(isa[instruction["op"]].operands),
            )
            for index, instruction in enumerate(program["instructions"])
        ]

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        if len(inputs) != len(self.program["inputs"]):
            raise ProgramError(f"{self.name}: expected {len(self.program['inputs'])} inputs, got {len(inputs)}")
        values: dict[str, torch.Tensor] = dict(zip(self.program["inputs"], inputs))
        profile = active_profile()
        with torch.profiler.record_function(f"npu:{self.name}"):
            for (index, label, op, kernel, attrs, arity), instruction in zip(self._steps, self.program["instructions"]):
                operands = _read(instruction["inputs"], arity, values)
                with torch.profiler.record_function(f"npu.{op}"):
                    start = time.perf_counter()
                    try:
                        result = kernel(operands, attrs)
                    except Exception as error:
                        raise ProgramError(f"{self.name}: {label} failed: {error}") from error
                    seconds = time.perf_counter() - start
                values[instruction["output"]] = result
                if profile is not None:
                    read, written = instruction_traffic(operands, result)
                    flops = instruction_flops(op, operands, attrs, result)
                    profile.records.append(InstructionRecord(self.name, index, op, seconds, read, written, flops))
        outputs = [values[name] for name in self.program["outputs"]]
        # Fresh memory, as the simulator returns: no output is a view of an input or an input itself.
        return [out.clone() if out._is_view() or any(out is each for each in inputs) else out for out in outputs]


def _read(names: list[Any], arity: int, values: dict[str, torch.Tensor]) -> list[Any]:
    """An instruction's operands: tensor names looked up, lists of names too, scalars as they are, and
    ``None`` for each optional operand left out at the end."""
    operands = [
        values[name] if isinstance(name, str) else [values[each] for each in name] if isinstance(name, list) else name
        for name in names
    ]
    return operands + [None] * (arity - len(operands))


def op_rows(records: Sequence[InstructionRecord]) -> list[OpRow]:
    """One row per ISA op in ``records``: calls, seconds, share of the total time, bytes moved (read +
    written) and FLOPs, summed; the slowest op first (ties: by name)."""
    grouped: dict[str, list[InstructionRecord]] = defaultdict(list)
    for record in records:
        grouped[record.op].append(record)
    total = sum(record.seconds for record in records)
    rows = [
        OpRow(
            op=op,
            calls=len(group),
            seconds=sum(r.seconds for r in group),
            share=sum(r.seconds for r in group) / total if total else 0.0,
            bytes_moved=sum(r.bytes_read + r.bytes_written for r in group),
            flops=sum(r.flops for r in group),
        )
        for op, group in grouped.items()
    ]
    return sorted(rows, key=lambda row: (-row.seconds, row.op))
