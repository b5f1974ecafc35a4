"""Build NPU programs: the bookkeeping every lowering rule shares (provided, not an exercise).

A :class:`ProgramBuilder` declares the program's tensors (unique names, shapes, dtypes), appends
instructions, and infers each result's shape and dtype by running the op's simulator kernel on
``meta`` tensors (no data is touched). A :class:`Ref` is the handle a lowering rule receives and
returns for a program tensor. :class:`LoweringError` names the node a lowering failed on.

The lowering's registry is built from pieces given here too: :data:`LowerFn` (the type of a rule),
:func:`rule_registrar` (the ``@lowers(target, ...)`` decorator that fills a registry), and
:class:`RmsNormChain` (what the RMSNorm chain finder returns).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from lab02_npu_backend.given.ir import PROGRAM_FORMAT, PROGRAM_VERSION, Program
from lab02_npu_backend.given.isa import DTYPE_NAMES, Kernel, default_isa

#: A lowering rule: (builder, the node's fake output value, *args, **kwargs) -> Ref or tuple.
LowerFn = Callable[..., Any]


class LoweringError(RuntimeError):
    """A node could not be lowered (no rule, or a rule produced the wrong shape); names the node."""


@dataclass(frozen=True)
class Ref:
    """A tensor of the program under construction."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)


class ProgramBuilder:
    """Collects tensors and instructions; infers each result's shape by running the op's kernel on meta tensors.

    Args:
        name: the program's name.
        kernels: ISA op name -> kernel (the simulator's ``KERNELS``); each kernel runs on ``meta``
            tensors to infer the shape and dtype of the result it will produce.
    """

    def __init__(self, name: str, kernels: Mapping[str, Kernel]) -> None:
        self.name = name
        self._kernels = kernels
        self.tensors: dict[str, dict[str, Any]] = {}
        self.inputs: list[str] = []
        self.instructions: list[dict[str, Any]] = []
        self._hint = "t"

    def _declare(self, name: str, shape: Sequence[int], dtype: torch.dtype) -> Ref:
        base, k = name, 1
        while name in self.tensors:
            name, k = f"{base}_{k}", k + 1
        self.tensors[name] = {"shape": [int(s) for s in shape], "dtype": DTYPE_NAMES[dtype]}
        return Ref(name, tuple(int(s) for s in shape), dtype)

    def add_input(self, name: str, value: torch.Tensor) -> Ref:
        if value.dtype not in DTYPE_NAMES:
            raise LoweringError(f"input {name!r} has dtype {value.dtype}, which the NPU cannot hold")
        ref = self._declare(name, value.shape, value.dtype)
        self.inputs.append(ref.name)
        return ref

    def naming(self, hint: str) -> None:
        """Name the next results after ``hint`` (the FX node being lowered)."""
        self._hint = hint

    def emit(self, op: str, inputs: list[Any], **attrs: Any) -> Ref:
        """Append ``op(inputs, attrs)`` and return its result (shape/dtype inferred on meta tensors)."""

        def meta(value: Any) -> Any:
            if isinstance(value, Ref):
                return torch.empty(value.shape, dtype=value.dtype, device="meta")
            if isinstance(value, list):
                return [meta(v) for v in value]
            return value

        kernel_attrs = {a.name: a.default for a in default_isa()[op].attributes.values()} | attrs
        result = self._kernels[op]([meta(v) for v in inputs], kernel_attrs)
        out = self._declare(self._hint, result.shape, result.dtype)

        def encode(value: Any) -> Any:
            if isinstance(value, Ref):
                return value.name
            if isinstance(value, list):
                return [encode(v) for v in value]
            return value

        self.instructions.append({"op": op, "inputs": [encode(v) for v in inputs], "output": out.name, "attrs": attrs})
        return out

    def program(self, outputs: list[Ref]) -> Program:
        return {
            "format": PROGRAM_FORMAT,
            "version": PROGRAM_VERSION,
            "name": self.name,
            "tensors": self.tensors,
            "inputs": self.inputs,
            "outputs": [ref.name for ref in outputs],
            "instructions": self.instructions,
        }


def rule_registrar(registry: dict[Any, LowerFn]) -> Callable[..., Callable[[LowerFn], LowerFn]]:
    """The decorator factory that registers lowering rules in ``registry``.

    ``lowers = rule_registrar(LOWERINGS)``; then ``@lowers(torch.neg, "neg", aten.neg.default)``
    above a rule makes it the rule of every target it names (a later registration of the same
    target replaces the earlier one) and returns the rule unchanged.
    """

    def lowers(*targets: Any) -> Callable[[LowerFn], LowerFn]:
        def register(rule: LowerFn) -> LowerFn:
            for target in targets:
                registry[target] = rule
            return rule

        return register

    return lowers


@dataclass(frozen=True)
class RmsNormChain:
    """``x * rsqrt(mean(x**2, -1, keepdim=True) + eps) [* weight]``, found in a graph.

    Attributes:
        x: the normalised input node.
        weight: the 1-D weight node multiplied last, or None.
        eps: the constant added to the mean.
        result: the node whose value the chain computes (emit ``rmsnorm`` there).
        inner: the other chain nodes (emit nothing for them).
    """

    x: fx.Node
    weight: fx.Node | None
    eps: float
    result: fx.Node
    inner: tuple[fx.Node, ...]
