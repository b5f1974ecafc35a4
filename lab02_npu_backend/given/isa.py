"""The NPU's instruction set (ISA), loaded from ``isa.json`` and checked before anything uses it.

The ISA is the contract between the compiler (lowering) and the hardware (simulator): a program
may name only these ops, with these operands, attributes and dtypes. It is *data* so that the
support tables, the lowering and the simulator all read the same facts, and so that a change of
hardware is a change of one file.

A broken ISA file must never half-load: :func:`load_isa` validates it against ``isa.schema.json``
(JSON Schema) and a few rules the schema cannot express, and raises :class:`IsaError` naming the
file and the problem.

The simulator's side of the contract: a :data:`Kernel` gives one op its meaning;
:func:`resolve_isa` turns what a user passes (an ``Isa``, a path, or nothing) into a loaded ISA, and
:func:`missing_kernels` lists the ISA's ops a kernel table leaves out.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

#: A simulator kernel: (operands, attributes with every default filled in) -> result tensor. Operands
#: follow the op's operand list in isa.json: tensors, Python numbers (``tensor_or_scalar``), a list of
#: tensors (``tensor_list``) or None (an omitted optional operand).
Kernel = Callable[[Sequence[Any], dict[str, Any]], torch.Tensor]

#: The ISA shipped with the lab, and its schema.
ISA_PATH = Path(__file__).with_name("isa.json")
SCHEMA_PATH = Path(__file__).with_name("isa.schema.json")

#: ISA dtype names and the torch dtypes they denote.
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}
#: The reverse of :data:`DTYPES`.
DTYPE_NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in DTYPES.items()}
#: ISA ops that only move elements, never compute one. A node lowered to these alone whose result has
#: the shape and dtype of its only non-empty input returns that input unchanged (a view to the same
#: shape, a full slice, an expand that broadcasts nothing, a cat with empty tensors): it does no work.
#: ``permute`` is not here: a transpose of a square matrix keeps the shape but moves elements.
SHAPE_ONLY_OPS = frozenset({"reshape", "expand", "slice", "concat"})
#: Python types an attribute value of each ISA attribute type may have.
ATTRIBUTE_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (float, int),
    "bool": (bool,),
    "string": (str,),
    "int_list": (list,),
}


class IsaError(ValueError):
    """The ISA file is missing, is not JSON, or breaks the schema; the message says where."""


class MissingKernelsError(ValueError, NotImplementedError):
    """The ISA names ops the simulator has no kernel for.

    A ``ValueError`` (this simulator cannot run that ISA) and also a ``NotImplementedError``: while the
    ``KERNELS`` table is being filled in, this is a TODO, and the tests report it as one line.
    """


@dataclass(frozen=True)
class Operand:
    """One input of an op: ``kind`` is ``tensor``, ``tensor_or_scalar`` or ``tensor_list``.

    ``dtypes``: the dtypes this operand may have when they are its own (softmax's boolean ``mask``);
    such an operand is outside the rule that an instruction's operands and result share one dtype.
    ``None``: the op's dtypes, shared with the result.
    """

    name: str
    kind: str
    optional: bool = False
    dtypes: frozenset[torch.dtype] | None = None


@dataclass(frozen=True)
class Attribute:
    """One attribute of an op (``type`` is a key of :data:`ATTRIBUTE_TYPES`)."""

    name: str
    type: str
    required: bool = False
    default: Any = None
    choices: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class OpSpec:
    """Everything the ISA says about one op."""

    name: str
    operands: tuple[Operand, ...]
    attributes: dict[str, Attribute]
    dtypes: frozenset[torch.dtype]
    semantics: str

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        """Whether this op may read and write tensors of ``dtype``."""
        return dtype in self.dtypes


@dataclass(frozen=True)
class Isa:
    """A loaded, validated instruction set."""

    name: str
    version: int
    ops: dict[str, OpSpec]
    source: Path

    def __contains__(self, op: str) -> bool:
        return op in self.ops

    def __getitem__(self, op: str) -> OpSpec:
        try:
            return self.ops[op]
        except KeyError:
            raise KeyError(f"op {op!r} is not in the {self.name} ISA ({', '.join(self.ops)})") from None


def _schema_errors(document: Any) -> list[str]:
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    messages = []
    for error in errors:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        op_name = _op_name_at(document, list(error.absolute_path))
        messages.append(f"at {where}{op_name}: {error.message}")
    return messages


def _op_name_at(document: Any, path: list) -> str:
    """`` (op 'matmul')`` when ``path`` points inside an op that has a readable name."""
    if len(path) >= 2 and path[0] == "ops" and isinstance(path[1], int):
        try:
            name = document["ops"][path[1]].get("name")
        except (AttributeError, IndexError, KeyError, TypeError):
            return ""
        return f" (op {name!r})" if isinstance(name, str) else ""
    return ""


def _build(document: dict[str, Any], source: Path) -> Isa:
    ops: dict[str, OpSpec] = {}
    for entry in document["ops"]:
        name = entry["name"]
        if name in ops:
            raise IsaError(f"{source}: op {name!r} is defined twice")
        attributes = {}
        for attr_name, attr in entry["attributes"].items():
            attribute = Attribute(
                attr_name,
                attr["type"],
                attr.get("required", False),
                attr.get("default"),
                tuple(attr["choices"]) if "choices" in attr else None,
            )
            if attribute.default is not None and not isinstance(attribute.default, ATTRIBUTE_TYPES[attribute.type]):
                raise IsaError(
                    f"{source}: op {name!r} attribute {attr_name!r}: default {attribute.default!r} "
                    f"is not of type {attribute.type}"
                )
            attributes[attr_name] = attribute
        operand_names = [operand["name"] for operand in entry["operands"]]
        if len(operand_names) != len(set(operand_names)):
            raise IsaError(f"{source}: op {name!r} has duplicate operand names {operand_names}")
        ops[name] = OpSpec(
            name=name,
            operands=tuple(
                Operand(
                    o["name"],
                    o["kind"],
                    o.get("optional", False),
                    frozenset(DTYPES[d] for d in o["dtypes"]) if "dtypes" in o else None,
                )
                for o in entry["operands"]
            ),
            attributes=attributes,
            dtypes=frozenset(DTYPES[d] for d in entry["dtypes"]),
            semantics=entry["semantics"],
        )
    return Isa(document["name"], document["version"], ops, source)


def load_isa(path: str | Path | None = None) -> Isa:
    """Read, validate and return an ISA (the lab's ``isa.json`` by default).

    Raises:
        IsaError: naming the file and what is wrong: not found, invalid JSON (with line and column),
            every schema violation (with the JSON path and op name), or a duplicate op.
    """
    source = Path(path) if path is not None else ISA_PATH
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise IsaError(f"{source}: ISA file not found") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise IsaError(f"{source}: not valid JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    problems = _schema_errors(document)
    if problems:
        raise IsaError(f"{source}: does not match isa.schema.json:\n  " + "\n  ".join(problems))
    return _build(document, source)


@functools.cache
def default_isa() -> Isa:
    """The lab's ISA, loaded once per process."""
    return load_isa()


def resolve_isa(isa: Isa | str | Path | None = None) -> Isa:
    """``isa`` itself when it is loaded, the ISA at a path (loaded and validated now), or the lab's.

    Raises:
        IsaError: the file at the path is missing or invalid (:func:`load_isa` does the checking).
    """
    if isa is None:
        return default_isa()
    if isinstance(isa, Isa):
        return isa
    return load_isa(isa)


def missing_kernels(isa: Isa, kernels: Mapping[str, Kernel]) -> list[str]:
    """The ops of ``isa`` that ``kernels`` has no kernel for, sorted (empty: the table is complete)."""
    return sorted(set(isa.ops) - set(kernels))
