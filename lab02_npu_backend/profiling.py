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

from collections.abc import Sequence
from typing import Any

import torch

from lab02_npu_backend.given.ir import Program
from lab02_npu_backend.given.isa import Isa
from lab02_npu_backend.given.profiling_tools import InstructionRecord, OpRow

from .simulator import KERNELS  # noqa: F401  (the kernels ProfiledProgram runs)


def instruction_traffic(operands: Sequence[Any], result: torch.Tensor) -> tuple[int, int]:
    """(bytes read, bytes written) of one instruction: its tensor operands (and the tensors of a list
    operand, such as ``concat``'s) read whole, its result written whole; scalars and ``None`` move nothing.

    Example: ``add`` of two float32 ``[4, 8]`` tensors reads 256 bytes and writes 128; ``add`` of one
    and the scalar 2.0 reads 128.
    """
    # guidance: begin
    # Sum tensor.nbytes over the operands that are tensors, and over the tensors inside a list operand;
    # the result's nbytes is what is written.
    # guidance: end
    # TODO
    raise NotImplementedError("instruction_traffic")


def instruction_flops(op: str, operands: Sequence[Any], attrs: dict[str, Any], result: torch.Tensor) -> int:
    """The FLOPs of one instruction of ISA op ``op``, by the module docstring's cost model.

    ``operands`` are the instruction's operands in the ISA's order (tensors, scalars, lists of tensors,
    ``None`` for an omitted optional operand), ``attrs`` its attributes with the ISA's defaults filled
    in, ``result`` what the kernel returned.

    Raises:
        ValueError: for an op the cost model does not know (naming it): a new ISA op must get a count,
            not a silent 0.
    """
    # guidance: begin
    # One branch per kind of op: matmul and conv2d (2 per multiply-add: a result element of matmul is K
    # of them, one of conv2d weight.numel() / out_channels), the elementwise ops (one per result element),
    # mean (one per input element), the fused ops (FUSED_FLOPS_PER_ELEMENT from profiling_tools), the
    # data-movement ops (DATA_MOVEMENT_OPS: 0); anything else raises.
    # guidance: end
    # TODO
    raise NotImplementedError("instruction_flops")


class ProfiledProgram:
    """A validated program run one timed instruction at a time: ``profiled(*inputs) -> outputs``.

    Each run records one :class:`~lab02_npu_backend.given.profiling_tools.InstructionRecord` per instruction
    into the active profile (:func:`~lab02_npu_backend.given.profiling_tools.active_profile`; none outside a
    ``with profile_npu()`` block), inside ``record_function`` scopes for ``torch.profiler``.

    Args:
        program: a program the simulator has validated (so every name, op and attribute is right).
        isa: the ISA it was validated against (its attribute defaults fill in omitted attributes).
    """

    def __init__(self, program: Program, isa: Isa) -> None:
        self.program = program
        self.isa = isa
        self.name = program["name"]

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        """Run the program on ``inputs`` (tensors, in the order of ``program["inputs"]``).

        The contract:

        - the outputs are bit-for-bit what the simulator returns: the same :data:`KERNELS` on the same
          values in the same order, and fresh memory (an output that is a view, or an input itself, is
          cloned);
        - a kernel that raises becomes a ``ProgramError`` naming the instruction
          (``lab02_npu_backend.given.ir.instruction_label``), as in the simulator;
        - every instruction's kernel runs inside ``torch.profiler.record_function(f"npu.{op}")`` and the
          whole program inside ``record_function(f"npu:{self.name}")``;
        - when :func:`~lab02_npu_backend.given.profiling_tools.active_profile` returns a profile, one
          ``InstructionRecord(program, index, op, seconds, bytes_read, bytes_written, flops)`` per
          instruction is appended to its ``records``, in program order; ``seconds`` times the kernel
          call alone (``time.perf_counter``), not the bookkeeping around it.
        """
        # guidance: begin
        # 1. values = {input name: tensor}; profile = active_profile() (from profiling_tools).
        # 2. For each instruction, in order: its operands (a name: values[name]; a list of names: a list
        #    of tensors; a number stays; pad with None up to len(self.isa[op].operands)), its attributes
        #    ({a.name: a.default for a in self.isa[op].attributes.values()} | instruction["attrs"]), then
        #    time KERNELS[op](operands, attrs) inside record_function, store the result under its
        #    output name, and append an InstructionRecord when there is a profile.
        # 3. Return the outputs, cloning any that is a view (tensor._is_view()) or an input itself.
        # Doing steps 1-2's name lookups once in __init__ keeps the timed loop short.
        # guidance: end
        # TODO
        raise NotImplementedError("ProfiledProgram.__call__")


def op_rows(records: Sequence[InstructionRecord]) -> list[OpRow]:
    """One row per ISA op in ``records``: calls, seconds, share of the total time (0 to 1; all 0 when the
    total is 0), bytes moved (read + written) and FLOPs, summed; the slowest op first (ties: by name)."""
    # guidance: begin
    # Group the records by op (collections.defaultdict(list)), build one OpRow per group, then sort by
    # (-seconds, op).
    # guidance: end
    # TODO
    raise NotImplementedError("op_rows")
