"""Guard bands: an interpreted kernel launch whose every memory access is checked against its tensors.

A Triton kernel addresses memory through raw pointers. A load or a store whose mask is wrong reads or
writes past a tensor's elements: a row past the last one (a program that handles several rows), a
column past the row's end, the padding of a head dimension. On a GPU that is a wrong answer or an
illegal address; in Triton's interpreter (a kernel run on CPU tensors) it reads or writes whatever lies
next in the process's memory. A read of a neighbour's finite values can even cancel out, and a write
corrupts the heap, so the test process dies later somewhere else (``realloc(): invalid old size``) or
nothing shows at all.

:func:`guarded_launch` makes every such access visible, for every launch
:func:`~labkit.triton_env.kernel_for` interprets:

- **addresses**: while the kernel runs, each load, store and atomic of the interpreter is checked lane
  by lane (the lanes its mask lets through): an address outside every tensor the launch was given raises
  :class:`OutOfBoundsRead` or :class:`OutOfBoundsWrite`, naming the nearest argument and how far
  past it the access went, before the access happens. The tensors include those inside tuple arguments
  and the bases of ``TensorDescriptor`` and ``triton.reinterpret`` arguments (addressed, so checked,
  though passed as they are). Launches are checked one at a time (a lock; the interpreter's builder is
  one object per process), a launch inside another against its own tensors;
- **gaps**: an address inside a tensor's span can still miss its elements (the gaps of a strided
  view: rows 64 apart but 40 long). So each tensor argument is copied into a fresh buffer with the same
  strides, in which every element that is not one of the tensor's (its gaps, and a guard before and after
  its span, as long as the span itself: an overrun by a whole tensor lands there) holds a NaN
  (:func:`guard_pattern`). A read of a gap returns NaN,
  which shows in the output; after the launch a write to a gap (or to a guard, where the address check
  is not available) raises :class:`OutOfBoundsWrite`; the values the kernel wrote into its arguments are
  copied back into the caller's tensors.

Tensors that share an element with another argument (an in-place kernel given one tensor as input
and output, or a view of another) are passed as they are: separate copies would separate what the kernel
reads from what it writes. Their addresses are still checked. Tensors with no elements and tensor
subclasses other than ``nn.Parameter`` (fake tensors never reach an interpreted launch) are passed as
they are too. Tensors inside tuple arguments are handled like the others.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

#: Elements of guard before and after each tensor's span: at least this many, and as many as the span itself
#: (up to :data:`MAX_GUARD_ELEMENTS`), so an overrun by up to a whole tensor (a row stride counted twice) lands in
#: the tensor's own guard, not in the next argument's copy, where its address would pass the check.
GUARD_ELEMENTS = 4096
MAX_GUARD_ELEMENTS = 1 << 22

#: Integer types of each element size: a guard is written and compared as the bits it is.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

#: NaN bit patterns to fill guards with, per floating dtype, none of them the NaN arithmetic produces
#: (except in fp8, which has too few NaNs): each tensor of a launch gets its own (the ``i``-th, cycling),
#: so a value copied from one tensor's guard into another's still counts as a stray write.
_NAN_PATTERNS = {
    torch.float64: [0x7FF8000000000001 + i for i in range(64)],
    torch.float32: [0x7FC00001 + i for i in range(64)],
    torch.float16: [0x7E01 + i for i in range(64)],
    torch.bfloat16: [0x7FC1 + i for i in range(62)],
    torch.float8_e4m3fn: [0x7F, 0xFF],
    torch.float8_e5m2: [0x7D, 0x7E, 0x7F, 0xFD, 0xFE],
    torch.float8_e4m3fnuz: [0x80],
    torch.float8_e5m2fnuz: [0x80],
}
#: Patterns of the other dtypes (integers, bool, any format without a NaN), per element size.
_BYTE_PATTERNS = {
    1: [0x5A, 0xA5, 0x3C, 0xC3],
    2: [0x5A00 + i for i in range(64)],
    4: [0x5A5A5A00 + i for i in range(64)],
    8: [0x5A5A5A5A5A5A5A00 + i for i in range(64)],
}


class OutOfBoundsAccess(RuntimeError):
    """A kernel read or wrote memory outside the tensors it was given (a mask that lets a row or column past)."""


class OutOfBoundsRead(OutOfBoundsAccess):
    """A load outside every tensor of the launch."""


class OutOfBoundsWrite(OutOfBoundsAccess):
    """A store outside every tensor of the launch, or into the gaps of a strided one."""


def guard_pattern(dtype: torch.dtype, index: int) -> int:
    """The bits filling the guard of a launch's ``index``-th tensor of ``dtype``: a NaN for floating dtypes
    (the load of a guard shows in the output), a pattern of its own otherwise."""
    patterns = _NAN_PATTERNS.get(dtype) or _BYTE_PATTERNS[torch.empty((), dtype=dtype).element_size()]
    return patterns[index % len(patterns)]


@dataclass
class _Fenced:
    """One tensor argument's guarded copy: the buffer, the copy inside it, and which elements are the tensor's."""

    original: torch.Tensor
    buffer: torch.Tensor  # the whole fenced memory, as integers of the element's size
    guard: int  # elements of guard before (and after) the tensor's span
    pattern: int  # what every element of ``buffer`` outside the tensor holds
    copy: torch.Tensor  # the original's shape, strides and values, inside ``buffer``
    owned: torch.Tensor  # bool per element of ``buffer``: True where an element of ``copy`` lies


@dataclass(frozen=True)
class _Extent:
    """The bytes from a tensor's first element to the end of its last, as the kernel addresses them."""

    name: str
    start: int
    end: int


def _span(tensor: torch.Tensor) -> int:
    """Elements from a tensor's first to its last, in its own strides (its storage offset aside)."""
    return 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))


def _extent(name: str, tensor: torch.Tensor) -> _Extent:
    start = tensor.data_ptr()
    return _Extent(name, start, start + _span(tensor) * tensor.element_size())


def _distinct_elements(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` with every broadcast dimension (stride 0) reduced to one index: each element once."""
    for dim in range(tensor.dim()):
        if tensor.stride(dim) == 0 and tensor.shape[dim] > 1:
            tensor = tensor.narrow(dim, 0, 1)
    return tensor


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The bytes of ``tensor``'s elements, in order (NaN compared as the bits it is)."""
    return tensor.clone(memory_format=torch.contiguous_format).reshape(-1).view(torch.uint8)


def _fence(tensor: torch.Tensor, index: int) -> _Fenced:
    span = _span(tensor)
    guard = min(max(GUARD_ELEMENTS, span), MAX_GUARD_ELEMENTS)
    elements = guard + span + guard
    pattern = guard_pattern(tensor.dtype, index)  # below the sign bit for every size but one byte (unsigned)
    buffer = torch.full((elements,), pattern, dtype=_BITS[tensor.element_size()], device=tensor.device)
    copy = buffer.view(tensor.dtype).as_strided(tensor.shape, tensor.stride(), guard)
    with torch.no_grad():
        _distinct_elements(copy).copy_(_distinct_elements(tensor))
    owned = torch.zeros(elements, dtype=torch.bool, device=tensor.device)
    owned.as_strided(tensor.shape, tensor.stride(), guard).fill_(True)
    return _Fenced(tensor, buffer, guard, pattern, copy, owned)


def _stray_writes(fenced: _Fenced) -> tuple[int, int, int]:
    """How many elements outside the tensor were written: before its first element, in the gaps of its
    strides, after its last element."""
    changed = (fenced.buffer != fenced.pattern) & ~fenced.owned
    first, last = fenced.guard, fenced.guard + _span(fenced.original)
    return int(changed[:first].sum()), int(changed[first:last].sum()), int(changed[last:].sum())


def _describe(position: str, tensor: torch.Tensor) -> str:
    return f"argument {position} ({tensor.dtype}, shape {list(tensor.shape)}, strides {list(tensor.stride())})"


def _is_fenceable(value: Any) -> bool:
    """Whether ``value`` is a tensor the launch may be given a fenced copy of (a plain tensor or a parameter)."""
    return type(value) in (torch.Tensor, torch.nn.Parameter) and value.numel() > 0


def _tensors_in(value: Any, position: str, inside: bool = False) -> Iterator[tuple[str, torch.Tensor, bool]]:
    """``(position, tensor, fenceable)`` for each tensor whose memory ``value`` lets the kernel address: tuples
    (Triton's tuple arguments) walked, the base of a ``TensorDescriptor`` or of ``triton.reinterpret``'s wrapper
    too (``inside`` one of those: addressed, so checked, but passed as it is)."""
    if isinstance(value, tuple):
        for index, item in enumerate(value):
            yield from _tensors_in(item, f"{position}[{index}]", inside)
    elif isinstance(value, torch.Tensor):
        if value.numel() > 0:
            yield position, value, _is_fenceable(value) and not inside
    elif isinstance(getattr(value, "base", None), torch.Tensor):  # a descriptor or a reinterpreted tensor
        yield from _tensors_in(value.base, f"{position}.base", inside=True)


def _swapped(value: Any, fences: dict[int, _Fenced]) -> Any:
    """``value`` with each fenced tensor replaced by its guarded copy (tuples rebuilt, named ones too)."""
    if isinstance(value, tuple):
        items = [_swapped(item, fences) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    fenced = fences.get(id(value))
    return fenced.copy if fenced is not None else value


def _element_offsets(tensor: torch.Tensor, unit: int) -> torch.Tensor:
    """Where each of ``tensor``'s elements starts in its storage, in ``unit`` bytes (each element once)."""
    scale = tensor.element_size() // unit
    offsets = torch.arange(_span(tensor) * scale, device="cpu")
    strides = [stride * scale for stride in tensor.stride()]
    return (offsets.as_strided(tensor.shape, strides, 0).flatten() + tensor.storage_offset() * scale).unique()


def _overlapping(tensors: list[torch.Tensor]) -> set[int]:
    """The ids of the tensors that share an element with another argument (an in-place kernel's input and
    output): fencing them apart would break the aliasing. Views of one storage that share no element (k and
    v sliced from one packed tensor) are fenced each on its own."""
    shared = set()
    for i, first in enumerate(tensors):
        for second in tensors[i + 1 :]:
            a, b = _extent("", first), _extent("", second)
            if a.end <= b.start or b.end <= a.start:  # not one byte in common
                continue
            unit = math.gcd(first.element_size(), second.element_size())
            if first is second or bool(torch.isin(_element_offsets(first, unit), _element_offsets(second, unit)).any()):
                shared |= {id(first), id(second)}
    return shared


def _check_addresses(kind: str, pointers: Any, mask: Any, extents: list[_Extent], kernel_name: str) -> None:
    """Raise when a lane of a load or store (``pointers``, interpreter handles) that ``mask`` lets through
    addresses bytes outside every extent."""
    addresses = np.asarray(pointers.data, dtype=np.uint64)
    active = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
    addresses = addresses[active]
    if addresses.size == 0:
        return
    width = max(1, pointers.get_element_ty().primitive_bitwidth // 8)
    inside = np.zeros(addresses.shape, dtype=bool)
    for extent in extents:
        inside |= (addresses >= np.uint64(extent.start)) & (addresses + np.uint64(width) <= np.uint64(extent.end))
    if inside.all():
        return
    stray = [int(address) for address in addresses[~inside]]
    first = stray[0]

    def distance(extent: _Extent) -> int:
        return extent.start - first if first < extent.start else first + width - extent.end

    nearest = min(extents, key=distance) if extents else None
    where = "no tensor at all"
    if nearest is not None:
        elements = max(1, -(-distance(nearest) // width))
        side = "before the first element of" if first < nearest.start else "past the last element of"
        where = f"{elements} element(s) {side} {nearest.name}"
    error = OutOfBoundsRead if kind == "load" else OutOfBoundsWrite  # an atomic writes
    article = "an" if kind == "atomic" else "a"
    raise error(
        f"kernel {kernel_name}: {article} {kind} of {len(stray)} element(s) outside every tensor it was given, "
        f"the first {where} (a mask that lets a row or a column past the end through)"
    )


#: The extents of each launch in progress, innermost last (a launch inside another checks against its own).
_active_extents: list[tuple[list[_Extent], str]] = []
#: Launches are checked one at a time: the interpreter's builder is one object for the whole process.
_launch_lock = threading.RLock()
#: The interpreter's memory operations: name -> (where its pointers are among the arguments, where its mask is;
#: None: every lane), and whether it reads or writes.
_MEMORY_OPERATIONS = {
    "create_masked_load": (0, 1, "load"),
    "create_masked_store": (0, 2, "store"),
    "create_atomic_rmw": (1, 3, "atomic"),
    "create_atomic_cas": (0, None, "atomic"),
}


class _AllLanes:
    """The mask of an operation that has none: every lane."""

    data = True


def _checked(operation: Callable[..., Any], pointer_at: int, mask_at: int | None, kind: str) -> Callable[..., Any]:
    def checked(*args: Any, **kwargs: Any) -> Any:
        extents, kernel_name = _active_extents[-1]
        mask = _AllLanes() if mask_at is None else args[mask_at]
        _check_addresses(kind, args[pointer_at], mask, extents, kernel_name)
        return operation(*args, **kwargs)

    return checked


@contextmanager
def _addresses_checked(extents: list[_Extent], kernel_name: str) -> Iterator[None]:
    """For the duration of the block, the interpreter checks each load's, store's and atomic's addresses against
    ``extents`` (what a Triton whose interpreter lacks one of these operations has of them). The outermost
    launch installs the checks on the interpreter's builder and puts back exactly what was there after it."""
    try:
        from triton.runtime import interpreter
    except ImportError:  # no Triton: nothing to check
        yield
        return
    builder = getattr(interpreter, "interpreter_builder", None)
    operations = {name: spec for name, spec in _MEMORY_OPERATIONS.items() if hasattr(builder, name)}
    outermost = not _active_extents
    saved = {name: vars(builder).get(name, _MISSING) for name in operations} if outermost else {}
    if outermost:
        for name, (pointer_at, mask_at, kind) in operations.items():
            setattr(builder, name, _checked(getattr(builder, name), pointer_at, mask_at, kind))
    _active_extents.append((extents, kernel_name))
    try:
        yield
    finally:
        _active_extents.pop()
        for name, value in saved.items():
            if value is _MISSING:
                delattr(builder, name)  # the class's own method again
            else:
                setattr(builder, name, value)


_MISSING = object()


@contextmanager
def fenced_arguments(args: tuple, kwargs: dict[str, Any], kernel_name: str) -> Iterator[tuple[tuple, dict]]:
    """Yield ``(args, kwargs)`` with each tensor replaced by its guarded copy, every access checked while
    the block runs; on exit, check the gaps and guards and copy what the kernel wrote back into the originals.

    Raises:
        OutOfBoundsRead, OutOfBoundsWrite: the kernel read or wrote outside the tensors it was given.
    """
    positions = [*((str(i), v) for i, v in enumerate(args)), *((repr(k), v) for k, v in kwargs.items())]
    found = [entry for position, value in positions for entry in _tensors_in(value, position)]
    tensors = [(position, tensor) for position, tensor, _ in found]
    shared = _overlapping([tensor for _, tensor in tensors])
    fences: dict[int, _Fenced] = {}
    for index, (_, tensor, fenceable) in enumerate(found):
        if fenceable and id(tensor) not in shared and id(tensor) not in fences:
            fences[id(tensor)] = _fence(tensor, index)
    passed = [(position, fences[id(t)].copy if id(t) in fences else t, t) for position, t in tensors]
    extents = [_extent(_describe(position, original), given) for position, given, original in passed]
    with _addresses_checked(extents, kernel_name):
        yield tuple(_swapped(value, fences) for value in args), {k: _swapped(v, fences) for k, v in kwargs.items()}
    problems = []
    for position, tensor in tensors:
        fenced = fences.pop(id(tensor), None)
        if fenced is None:
            continue
        before, gaps, after = _stray_writes(fenced)
        places = [
            f"{count} {where}"
            for count, where in (
                (before, "before its first element"),
                (gaps, "between its elements (in the gaps of its strides)"),
                (after, "after its last element"),
            )
            if count
        ]
        if places:
            problems.append(f"{_describe(position, tensor)}: {', '.join(places)}")
        written, original = _distinct_elements(fenced.copy), _distinct_elements(tensor)
        if not torch.equal(_bytes(written), _bytes(original)):  # only what changed: an input keeps its version
            with torch.no_grad(), torch.inference_mode(tensor.is_inference()):
                original.copy_(written)
    if problems:
        raise OutOfBoundsWrite(
            f"kernel {kernel_name} wrote outside the tensors it was given (a store whose mask lets a row or a "
            f"column past the end through): {'; '.join(problems)}"
        )


def guarded_launch(launch: Callable[..., Any], kernel_name: str) -> Callable[..., Any]:
    """``launch`` (an interpreted ``kernel[grid]``) run with its accesses checked and its tensors fenced."""

    def run(*args: Any, **kwargs: Any) -> Any:
        with _launch_lock, fenced_arguments(args, kwargs, kernel_name) as (fenced_args, fenced_kwargs):
            try:
                return launch(*fenced_args, **fenced_kwargs)
            except Exception as error:  # the interpreter wraps what a load or store raised (once per
                cause = error.__cause__  # nested @triton.jit call): unwrap ours
                while cause is not None and not isinstance(cause, OutOfBoundsAccess):
                    cause = cause.__cause__
                if cause is not None:
                    raise cause from None
                raise

    return run
