"""Simulate: execute an NPU program, after checking it against the ISA.

The simulator plays the hardware. It trusts nothing: before a program runs, :meth:`NpuSimulator.load`
validates every instruction against the ISA and raises a ``ProgramError`` naming the first
instruction that breaks a rule (the rules are listed in :mod:`lab02_npu_backend.given.ir`). Validation
happens once per program; running is then a tight loop over pre-bound kernels, checking each
result's shape and dtype against the program's declarations so that a wrong kernel or a wrong
lowering can never pass silently. The backend calls programs on every model call: keep ``run``
cheap (the benchmark compares you with eager PyTorch).

Each ISA op's meaning is one entry of :data:`KERNELS`, written with PyTorch CPU ops (deterministic).
The lowering reuses the same kernels on ``meta`` tensors to infer shapes, so an op has exactly one
definition in the whole lab.
"""

from __future__ import annotations

# These are the imports the finished module uses; the ones marked `noqa: F401` stay unused until
# you write your code.
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F  # noqa: F401

from lab02_npu_backend.given.ir import PROGRAM_FORMAT, PROGRAM_VERSION, Program, ProgramError, instruction_label  # noqa: F401
from lab02_npu_backend.given.isa import (  # noqa: F401
    ATTRIBUTE_TYPES,
    DTYPES,
    Isa,
    Kernel,
    MissingKernelsError,
    OpSpec,
    missing_kernels,
    resolve_isa,
)

#: The meaning of every ISA op (read "semantics" in isa.json): one :data:`~lab02_npu_backend.given.isa.Kernel`
#: each, which says what a kernel receives (operands, attributes) and returns.
KERNELS: dict[str, Kernel] = {
    "matmul": lambda ops, a: torch.matmul(ops[0], ops[1]),
    "add": lambda ops, a: torch.add(ops[0], ops[1]),
    # TODO: the 13 other ops.
    # guidance: begin
    # Hints: F.conv2d, torch.rsqrt, torch.mean, F.layer_norm, F.rms_norm,
    # torch.ops.aten.slice.Tensor(x, dim, start, end, step), torch.cat, Tensor.expand.
    # Softmax: exp of a large score overflows float32 (softmax([100, 0, -5]) must be [1, 0, 0], not
    # [nan, 0, 0]): subtract each row's maximum first, as torch.softmax does. Causal softmax: fill
    # positions j > i of the last two dimensions with -inf (torch.ones(q, k, dtype=torch.bool,
    # device=x.device).triu(1)), then softmax. The optional boolean mask (operand 1, None when
    # omitted): add 0 where it is true and -inf where it is false before the softmax
    # (torch.zeros_like(mask, dtype=x.dtype).masked_fill_(mask.logical_not(), float("-inf"))).
    # A row left with no position (its maximum is -inf) is NaN, as in torch.softmax; with the
    # zero_empty_rows attribute its weights are 0 instead (what scaled_dot_product_attention gives).
    # The activation unit ("activation"): relu, gelu, gelu_tanh (F.gelu(x, approximate="tanh")),
    # silu, sigmoid, tanh, and clamp (torch.clamp(x, min, max): ReLU6 is clamp 0..6). Only clamp
    # reads the min/max attributes, and it needs at least one of them: raise (ValueError) for clamp
    # without bounds, and for bounds given to any other function; never ignore them silently.
    # guidance: end
}


class NpuSimulator:
    """Validates and runs NPU programs against an ISA.

    Args:
        isa: a loaded :class:`~lab02_npu_backend.given.isa.Isa`, a path to an ISA JSON file (loaded and
            validated now: a broken file raises ``IsaError``), or ``None`` for the lab's ``isa.json``.

    Raises:
        IsaError: the ISA file is missing or invalid (``load_isa`` does the checking).
        MissingKernelsError: the ISA names an op the simulator has no kernel for (a ``ValueError``).
    """

    def __init__(self, isa: Isa | str | Path | None = None) -> None:
        self.isa = resolve_isa(isa)
        missing = missing_kernels(self.isa, KERNELS)
        if missing:
            raise MissingKernelsError(f"the simulator has no kernel for ISA ops {missing}: add them to KERNELS")

    def load(self, program: Any) -> Callable[..., list[torch.Tensor]]:
        """Validate ``program`` and return a callable ``loaded(*input_tensors) -> list of outputs``.

        Validation (raise ``ProgramError``; per instruction, start the message with
        ``instruction_label(index, instruction)``, e.g. "instruction 1 (matmul -> xw): ..."):

        - the program has every key of :class:`~lab02_npu_backend.given.ir.Program`, the right format and
          version; every tensor declaration has a shape (non-negative ints) and a known dtype;
          inputs and outputs are declared;
        - each instruction is an object with exactly ``op``, ``inputs``, ``output``, ``attrs``;
          ``op`` is in the ISA ("unknown op 'x'"); operands match the op's operand list (a required
          one missing -> "required"; a name that is not declared, or read before it is written, is
          named in the message); attributes are declared, typed (``ATTRIBUTE_TYPES``; ``bool`` is
          not an ``int``), within ``choices``, required ones present (defaults filled in otherwise);
          the output is declared and written once ("already written");
        - every operand and the result have one dtype, which the op supports (name the dtype); an
          operand whose ISA entry lists its own ``dtypes`` (``Operand.dtypes``: softmax's boolean
          ``mask``) must have one of those instead, and is outside the one-dtype rule (name the
          operand: "operand 'mask' has dtype float32 ...");
        - every output is written by the end.

        Running: check each input's shape and dtype ("input 'x' ..."), run the kernels in order, and
        check each result against its declared shape and dtype (naming the instruction). Wrap a
        kernel's exception in a ``ProgramError`` naming the instruction. The outputs share memory
        with no input: results come back from NPU memory as new tensors, so return a copy of an
        output that is a view (``Tensor._is_view()``: reshape, slice, permute, expand) or an input
        itself (a later write in place on one would otherwise change the other).
        """
        # TODO: validate once, bind each instruction to its kernel, return a fast runner.
        raise NotImplementedError("NpuSimulator.load")

    def validate(self, program: Any) -> None:
        """Raise ``ProgramError`` (naming the instruction) unless ``program`` is a valid program."""
        self.load(program)

    def run(self, program: Program, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Validate ``program`` and run it once on ``inputs``."""
        return self.load(program)(*inputs)
