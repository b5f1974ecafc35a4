"""The NPU program format (the "NPU IR"): what the lowering writes and the simulator runs.

A program is plain JSON-serialisable data, so it can be printed, saved, diffed and shipped to a
device. One program is one NPU partition of an FX graph::

    {
      "format": "npu-program",
      "version": 1,
      "name": "npu_partition_0",
      "tensors": {                         # every tensor the program touches, declared once
        "x":   {"shape": [4, 64],  "dtype": "float32"},
        "w":   {"shape": [128, 64], "dtype": "float32"},
        "w_t": {"shape": [64, 128], "dtype": "float32"},
        "y":   {"shape": [4, 128], "dtype": "float32"}
      },
      "inputs": ["x", "w"],                # fed by the host, in this order
      "outputs": ["y"],                    # returned to the host, in this order
      "instructions": [
        {"op": "permute", "inputs": ["w"], "output": "w_t", "attrs": {"dims": [1, 0]}},
        {"op": "matmul",  "inputs": ["x", "w_t"], "output": "y", "attrs": {}}
      ]
    }

Rules (the simulator enforces them, naming the instruction that breaks one):

- ``op`` is an op of the ISA (:mod:`lab02_npu_backend.given.isa`); ``inputs`` follow the op's operand list:
  a tensor name for a ``tensor`` operand, a tensor name or a JSON number for ``tensor_or_scalar``,
  a list of names for ``tensor_list``, ``null`` for an omitted optional operand.
- ``attrs`` holds only attributes the op declares, with the declared types; required ones present.
- Every tensor is written once (single assignment) and read only after it is written (or is an input).
- Every tensor's dtype is one the op supports, and each instruction's result must have exactly the
  declared shape and dtype: the NPU never changes a dtype silently.
"""

from __future__ import annotations

import json
from typing import Any, TypedDict

#: Value of a program's ``"format"`` key.
PROGRAM_FORMAT = "npu-program"
#: The program format version this lab reads and writes.
PROGRAM_VERSION = 1


class TensorDecl(TypedDict):
    """Shape and ISA dtype name of one program tensor."""

    shape: list[int]
    dtype: str


class Instruction(TypedDict):
    """One NPU instruction: an ISA op, its operands, its result tensor and its attributes."""

    op: str
    inputs: list[Any]
    output: str
    attrs: dict[str, Any]


class Program(TypedDict):
    """A whole NPU program (see the module docstring)."""

    format: str
    version: int
    name: str
    tensors: dict[str, TensorDecl]
    inputs: list[str]
    outputs: list[str]
    instructions: list[Instruction]


class ProgramError(ValueError):
    """A program is malformed or breaks the ISA. The message names the instruction (index and op)."""


def instruction_label(index: int, instruction: Any) -> str:
    """``instruction 3 (matmul -> t7)``: how errors name an instruction."""
    if isinstance(instruction, dict):
        return f"instruction {index} ({instruction.get('op')!s} -> {instruction.get('output')!s})"
    return f"instruction {index}"


def program_to_json(program: Program) -> str:
    """Serialise a program (stable key order, so two equal programs give equal text)."""
    return json.dumps(program, indent=1, sort_keys=True)
