"""Simulate: execute an NPU program, after checking it against the ISA.

The simulator plays the hardware. It trusts nothing: before a program runs, :meth:`NpuSimulator.load`
validates every instruction against the ISA (known op, operand kinds, attributes and their types,
single assignment, supported dtypes, no implicit dtype conversion) and raises a ``ProgramError``
naming the first instruction that breaks a rule. Validation happens once per program; running is
then a tight loop over pre-bound kernels, checking each result's shape and dtype against the
program's declarations so that a wrong kernel or a wrong lowering can never pass silently.

Each ISA op's meaning is one entry of :data:`KERNELS`, written with PyTorch CPU ops (deterministic).
The lowering reuses the same kernels on ``meta`` tensors to infer shapes, so an op has exactly one
definition in the whole lab.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from lab02_npu_backend.given.ir import PROGRAM_FORMAT, PROGRAM_VERSION, Program, ProgramError, instruction_label
from lab02_npu_backend.given.isa import (
    ATTRIBUTE_TYPES,
    DTYPES,
    Isa,
    Kernel,
    MissingKernelsError,
    OpSpec,
    missing_kernels,
    resolve_isa,
)

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}


def _activation(ops: Sequence[Any], attrs: dict[str, Any]) -> torch.Tensor:
    """The activation unit: a function of ``_ACTIVATIONS``, or ``clamp`` to ``[min, max]``."""
    function, low, high = attrs["function"], attrs["min"], attrs["max"]
    if function == "clamp":
        if low is None and high is None:
            raise ValueError("clamp needs a min, a max or both")
        return torch.clamp(ops[0], low, high)
    if low is not None or high is not None:
        raise ValueError(f"min and max are attributes of clamp only, not of {function}")
    return _ACTIVATIONS[function](ops[0])


@functools.lru_cache(maxsize=64)
def _future_positions(queries: int, keys: int, device: torch.device) -> torch.Tensor:
    """``mask[i, j]`` is True where key j comes after query i (cached: the model calls it every step)."""
    return torch.ones(queries, keys, dtype=torch.bool, device=device).triu(1)


def _softmax(ops: Sequence[Any], attrs: dict[str, Any]) -> torch.Tensor:
    """Softmax along ``dim`` (PyTorch's kernel subtracts each row's maximum first: ``exp`` of a large
    score overflows otherwise), after the causal mask and the boolean ``mask``, if any; with
    ``zero_empty_rows``, a row left with no position (its maximum is -inf) weighs nothing, instead of NaN."""
    x, mask, dim = ops[0], ops[1] if len(ops) > 1 else None, attrs["dim"]
    if attrs["causal"]:
        if dim not in (-1, x.ndim - 1) or x.ndim < 2:
            raise ValueError("causal softmax must run along the last dimension of a >= 2-D tensor")
        x = x.masked_fill(_future_positions(x.shape[-2], x.shape[-1], x.device), float("-inf"))
    if mask is not None:  # the additive -inf mask scaled_dot_product_attention makes of a boolean one
        x = x + torch.zeros_like(mask, dtype=x.dtype).masked_fill_(mask.logical_not(), float("-inf"))
    weights = torch.softmax(x, dim)
    if attrs["zero_empty_rows"]:
        weights = weights.masked_fill(x.amax(dim, keepdim=True) == float("-inf"), 0.0)
    return weights


def _trailing(x: torch.Tensor, ndim: int) -> list[int]:
    return list(x.shape[x.ndim - ndim :])


#: The meaning of every ISA op.
KERNELS: dict[str, Kernel] = {
    "matmul": lambda ops, a: torch.matmul(ops[0], ops[1]),
    "conv2d": lambda ops, a: F.conv2d(ops[0], ops[1], ops[2], a["stride"], a["padding"], a["dilation"], a["groups"]),
    "add": lambda ops, a: torch.add(ops[0], ops[1]),
    "mul": lambda ops, a: torch.mul(ops[0], ops[1]),
    "rsqrt": lambda ops, a: torch.rsqrt(ops[0]),
    "mean": lambda ops, a: torch.mean(ops[0], a["dims"], a["keepdim"]),
    "softmax": _softmax,
    "layernorm": lambda ops, a: F.layer_norm(ops[0], _trailing(ops[0], a["normalized_ndim"]), ops[1], ops[2], a["eps"]),
    "rmsnorm": lambda ops, a: F.rms_norm(ops[0], _trailing(ops[0], a["normalized_ndim"]), ops[1], a["eps"]),
    "activation": _activation,
    "reshape": lambda ops, a: torch.reshape(ops[0], a["shape"]),
    "permute": lambda ops, a: ops[0].permute(a["dims"]),
    "slice": lambda ops, a: torch.ops.aten.slice.Tensor(ops[0], a["dim"], a["start"], a["end"], a["step"]),
    "concat": lambda ops, a: torch.cat(ops[0], a["dim"]),
    "expand": lambda ops, a: ops[0].expand(a["shape"]),
}


@dataclass(frozen=True)
class _Step:
    """One validated instruction, bound to its kernel (tensors still named as in the program)."""

    label: str
    kernel: Kernel
    operands: tuple[Any, ...]  # ("t", name) | ("s", number) | ("l", names) | ("n", None)
    attrs: dict[str, Any]
    output: str
    shape: torch.Size
    dtype: torch.dtype


#: Reads one instruction's operands out of the slot list: ``read(slots) -> operands``.
OperandReader = Callable[[list[Any]], Sequence[Any]]


class _Compiled(NamedTuple):
    """One instruction as the run loop sees it: everything resolved to slot numbers."""

    kernel: Kernel
    read: OperandReader
    attrs: dict[str, Any]
    output: int  # the slot the result goes to
    shape: torch.Size  # declared result shape and dtype, checked on every run
    dtype: torch.dtype
    label: str  # names the instruction in errors
    release: tuple[int, ...]  # slots nobody reads after this instruction


class LoadedProgram:
    """A validated program, ready to run: ``loaded(*input_tensors) -> list of output tensors``.

    Loading compiles the program once, so that a call is a tight loop. Every value an instruction
    reads gets a numbered slot in one list: the program's inputs first, then the constants (scalar
    operands, and None for omitted optional operands, filled in now), then each instruction's
    result. Each instruction becomes a :class:`_Compiled` tuple whose ``read`` fetches its operands
    by slot number: no name lookups, no operand parsing, no re-validation on the hot path. On a
    sub-millisecond model this per-instruction overhead is what the benchmark measures.

    A result's slot is cleared after its last reader (like the ``x = None`` lines in FX's generated
    code), so PyTorch's allocator reuses memory that is still in cache, as eager execution does.
    The outputs share memory with no input: on hardware they are copied out of NPU memory.
    """

    def __init__(self, program: Program, steps: list[_Step], inputs: list[tuple[str, torch.Size, torch.dtype]]) -> None:
        self.program = program
        self.name = program["name"]
        self._inputs = inputs
        slot_of = {name: index for index, (name, _, _) in enumerate(inputs)}
        self._initial_slots: list[Any] = [None] * len(inputs)  # a call copies this, then fills in the inputs

        def new_slot(value: Any = None) -> int:
            self._initial_slots.append(value)
            return len(self._initial_slots) - 1

        def operand_slots(kind: str, value: Any) -> int | tuple[int, ...]:
            if kind == "t":
                return slot_of[value]
            if kind == "l":
                return tuple(slot_of[name] for name in value)
            return new_slot(value)  # a constant: a scalar, or None for an omitted optional operand

        positions, last_use = [], {}  # last_use: result slot -> last instruction that writes or reads it
        for index, step in enumerate(steps):
            positions.append([operand_slots(kind, value) for kind, value in step.operands])
            for position in positions[-1]:
                for slot in position if isinstance(position, tuple) else (position,):
                    if slot in last_use:
                        last_use[slot] = index
            slot_of[step.output] = new_slot()
            last_use[slot_of[step.output]] = index
        self._outputs = [slot_of[name] for name in program["outputs"]]
        for slot in self._outputs:
            last_use.pop(slot, None)  # returned to the caller: never released
        release: dict[int, list[int]] = {}
        for slot, index in last_use.items():
            release.setdefault(index, []).append(slot)
        self._steps = [
            _Compiled(
                step.kernel,
                _operand_reader(positions[index]),
                step.attrs,
                slot_of[step.output],
                step.shape,
                step.dtype,
                step.label,
                tuple(release.get(index, ())),
            )
            for index, step in enumerate(steps)
        ]

    @property
    def num_instructions(self) -> int:
        return len(self._steps)

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        if len(inputs) != len(self._inputs):
            raise ProgramError(f"{self.name}: expected {len(self._inputs)} inputs, got {len(inputs)}")
        for tensor, (name, shape, dtype) in zip(inputs, self._inputs):
            if not isinstance(tensor, torch.Tensor) or tensor.shape != shape or tensor.dtype is not dtype:
                got = (
                    f"{tensor.dtype}{list(tensor.shape)}" if isinstance(tensor, torch.Tensor) else type(tensor).__name__
                )
                raise ProgramError(f"{self.name}: input {name!r} must be {dtype}{list(shape)}, got {got}")
        slots = self._initial_slots.copy()
        slots[: len(inputs)] = inputs
        for kernel, read, attrs, output, shape, dtype, label, release in self._steps:
            try:
                result = kernel(read(slots), attrs)
            except Exception as error:  # a kernel failure is a program bug: name the instruction
                raise ProgramError(f"{self.name}: {label} failed: {error}") from error
            # The hardware's contract: a result is exactly what the program declared.
            # (dtypes are singletons, so `is not` is the cheap exact test.)
            if result.dtype is not dtype or result.shape != shape:
                raise ProgramError(
                    f"{self.name}: {label} produced {result.dtype}{list(result.shape)}, "
                    f"but the program declares {dtype}{list(shape)}"
                )
            slots[output] = result
            for slot in release:
                slots[slot] = None
        # The hardware hands results back in fresh host memory: a kernel's view of an input (a reshape,
        # a slice), or an input returned as it is, would let a later write in place on one change the other.
        return [
            out.clone() if out._is_view() or any(out is tensor for tensor in inputs) else out
            for out in (slots[slot] for slot in self._outputs)
        ]


def _operand_reader(positions: list[int | tuple[int, ...]]) -> OperandReader:
    """Build ``read(slots) -> operands`` for operands at ``positions`` (a tuple: a tensor list).

    ``operator.itemgetter`` fetches several plain slots in one C call; for a single position it
    would return the bare value instead of a sequence, hence the 1-tuple lambda.
    """
    if any(isinstance(position, tuple) for position in positions):
        return lambda slots: [
            [slots[i] for i in position] if isinstance(position, tuple) else slots[position] for position in positions
        ]
    if len(positions) == 1:
        (position,) = positions
        return lambda slots: (slots[position],)
    return operator.itemgetter(*positions)  # every ISA op has at least one operand


class NpuSimulator:
    """Validates and runs NPU programs against an ISA.

    Args:
        isa: a loaded :class:`~lab02_npu_backend.given.isa.Isa`, a path to an ISA JSON file (loaded and
            validated now: a broken file raises ``IsaError``), or ``None`` for the lab's ``isa.json``.

    Raises:
        IsaError: the ISA file is missing or invalid.
        MissingKernelsError: the ISA names an op the simulator has no kernel for (a ``ValueError``).
    """

    def __init__(self, isa: Isa | str | Path | None = None) -> None:
        self.isa = resolve_isa(isa)
        missing = missing_kernels(self.isa, KERNELS)
        if missing:
            raise MissingKernelsError(f"the simulator has no kernel for ISA ops {missing}: add them to KERNELS")

    def validate(self, program: Any) -> None:
        """Raise ``ProgramError`` (naming the instruction) unless ``program`` is a valid program."""
        self.load(program)

    def run(self, program: Program, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Validate ``program`` and run it once on ``inputs``."""
        return self.load(program)(*inputs)

    def load(self, program: Any) -> LoadedProgram:
        """Validate ``program`` and bind its instructions to kernels, ready to run many times."""
        name = _program_name(program)
        tensors = _tensor_table(program, name)
        defined: set[str] = set()
        inputs = []
        for tensor in program["inputs"]:
            if tensor not in tensors:
                raise ProgramError(f"{name}: input {tensor!r} is not declared in 'tensors'")
            if tensor in defined:
                raise ProgramError(f"{name}: input {tensor!r} is listed twice")
            defined.add(tensor)
            inputs.append((tensor, *tensors[tensor]))
        steps = [
            self._check_instruction(name, index, instruction, tensors, defined)
            for index, instruction in enumerate(program["instructions"])
        ]
        for tensor in program["outputs"]:
            if tensor not in defined:
                raise ProgramError(f"{name}: output {tensor!r} is never written")
        return LoadedProgram(program, steps, inputs)

    def _check_instruction(
        self,
        name: str,
        index: int,
        instruction: Any,
        tensors: dict[str, tuple[torch.Size, torch.dtype]],
        defined: set[str],
    ) -> _Step:
        label = instruction_label(index, instruction)

        def fail(message: str) -> ProgramError:
            return ProgramError(f"{name}: {label}: {message}")

        if not isinstance(instruction, dict) or set(instruction) != {"op", "inputs", "output", "attrs"}:
            raise fail("an instruction is an object with exactly the keys op, inputs, output, attrs")
        op = instruction["op"]
        if op not in self.isa:
            raise fail(f"unknown op {op!r}; the ISA has {', '.join(self.isa.ops)}")
        spec = self.isa[op]
        operands = self._check_operands(spec, instruction["inputs"], tensors, defined, fail)
        attrs = _check_attrs(spec, instruction["attrs"], fail)
        output = instruction["output"]
        if not isinstance(output, str) or output not in tensors:
            raise fail(f"output {output!r} is not declared in 'tensors'")
        if output in defined:
            raise fail(f"output {output!r} is already written (each tensor is written once)")
        shape, dtype = tensors[output]
        used = set()  # the dtypes of the operands that share the result's dtype
        for operand, (kind, value) in zip(spec.operands, operands):
            names = [value] if kind == "t" else list(value) if kind == "l" else []
            for each in (tensors[n][1] for n in names):
                if operand.dtypes is None:
                    used.add(each)
                elif each not in operand.dtypes:
                    allowed = ", ".join(sorted(str(d).removeprefix("torch.") for d in operand.dtypes))
                    raise fail(
                        f"operand {operand.name!r} has dtype {str(each).removeprefix('torch.')}; "
                        f"{op} takes {allowed} there"
                    )
        for each in used | {dtype}:
            if not spec.supports_dtype(each):
                raise fail(f"dtype {str(each).removeprefix('torch.')} is not supported by {op}")
        if len(used | {dtype}) > 1:
            raise fail("operands and result must share one dtype (the NPU never converts dtypes implicitly)")
        defined.add(output)
        return _Step(label, KERNELS[op], tuple(operands), attrs, output, shape, dtype)

    @staticmethod
    def _check_operands(spec: OpSpec, values: Any, tensors: dict, defined: set[str], fail) -> list[tuple[str, Any]]:
        if not isinstance(values, list) or len(values) > len(spec.operands):
            raise fail(f"{spec.name} takes at most {len(spec.operands)} operands, as a list")
        operands = []
        for position, operand in enumerate(spec.operands):
            value = values[position] if position < len(values) else None

            def tensor_name(v: Any) -> str:
                if not isinstance(v, str) or v not in tensors:
                    raise fail(f"operand {operand.name!r}: {v!r} is not a declared tensor")
                if v not in defined:
                    raise fail(f"operand {operand.name!r}: tensor {v!r} is read before it is written")
                return v

            if value is None:
                if not operand.optional:
                    raise fail(f"operand {operand.name!r} is required")
                operands.append(("n", None))
            elif operand.kind == "tensor_list":
                if not isinstance(value, list) or not value:
                    raise fail(f"operand {operand.name!r} must be a non-empty list of tensors")
                operands.append(("l", tuple(tensor_name(v) for v in value)))
            elif operand.kind == "tensor_or_scalar" and isinstance(value, (int, float)) and not isinstance(value, bool):
                operands.append(("s", value))
            else:
                operands.append(("t", tensor_name(value)))
        return operands


def _program_name(program: Any) -> str:
    if not isinstance(program, dict):
        raise ProgramError(f"a program is a JSON object, got {type(program).__name__}")
    missing = {"format", "version", "name", "tensors", "inputs", "outputs", "instructions"} - set(program)
    if missing:
        raise ProgramError(f"program is missing keys {sorted(missing)}")
    if program["format"] != PROGRAM_FORMAT or program["version"] != PROGRAM_VERSION:
        raise ProgramError(f"expected format {PROGRAM_FORMAT!r} version {PROGRAM_VERSION}")
    for key in ("inputs", "outputs", "instructions"):
        if not isinstance(program[key], list):
            raise ProgramError(f"program {key!r} must be a list")
    return str(program["name"])


def _tensor_table(program: Program, name: str) -> dict[str, tuple[torch.Size, torch.dtype]]:
    if not isinstance(program["tensors"], dict):
        raise ProgramError(f"{name}: 'tensors' must map names to {{shape, dtype}}")
    table = {}
    for tensor, decl in program["tensors"].items():
        shape = decl.get("shape") if isinstance(decl, dict) else None
        dtype = decl.get("dtype") if isinstance(decl, dict) else None
        if not isinstance(shape, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape
        ):
            raise ProgramError(f"{name}: tensor {tensor!r} needs a shape (a list of non-negative ints)")
        if dtype not in DTYPES:
            raise ProgramError(f"{name}: tensor {tensor!r} has unknown dtype {dtype!r}")
        table[tensor] = (torch.Size(shape), DTYPES[dtype])
    return table


def _check_attrs(spec: OpSpec, attrs: Any, fail) -> dict[str, Any]:
    if not isinstance(attrs, dict):
        raise fail("attrs must be an object")
    unknown = sorted(set(attrs) - set(spec.attributes))
    if unknown:
        raise fail(f"unknown attribute(s) {unknown} for {spec.name}")
    checked = {}
    for attr in spec.attributes.values():
        if attr.name not in attrs:
            if attr.required:
                raise fail(f"missing required attribute {attr.name!r}")
            checked[attr.name] = attr.default
            continue
        value = attrs[attr.name]
        kinds = ATTRIBUTE_TYPES[attr.type]
        wrong_type = not isinstance(value, kinds) or (attr.type != "bool" and isinstance(value, bool))
        if attr.type == "int_list" and not wrong_type:
            wrong_type = not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        if wrong_type:
            raise fail(f"attribute {attr.name!r} must be {attr.type}, got {value!r}")
        if attr.choices is not None and value not in attr.choices:
            raise fail(f"attribute {attr.name!r} must be one of {list(attr.choices)}, got {value!r}")
        checked[attr.name] = value
    return checked
