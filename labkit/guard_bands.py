"""Guard bands: an interpreted kernel launch on copies of its tensors, fenced by bytes nobody may touch.

A Triton kernel addresses memory through raw pointers. A load or a store whose mask is wrong reads or
writes past a tensor's elements: a row past the last one (a program that handles several rows), a
column past the row's end, the padding of a head dimension. On a GPU that is a wrong answer or an
illegal address; in Triton's interpreter (a kernel run on CPU tensors) it reads or writes whatever lies
next in the process's memory. A read of a neighbour's finite values can even cancel out, and a write
corrupts the heap, so the test process dies later somewhere else (``realloc(): invalid old size``) or
nothing shows at all.

:func:`guarded_launch` makes both kinds of access visible, for every launch :func:`~labkit.triton_env.kernel_for`
interprets:

- each tensor argument is copied into a fresh buffer with the same strides, in which every element that
  is not one of the tensor's (the gaps of a strided view, and :data:`GUARD_ELEMENTS` elements before and
  after its span) holds a NaN (:func:`guard_pattern`; fp8 included). A read outside the tensor returns
  NaN, which shows in the output;
- after the launch those bytes are compared: a write outside every tensor raises
  :class:`OutOfBoundsWrite`, naming the argument and where the write landed;
- the values the kernel wrote into its arguments are copied back into the caller's tensors.

Tensors that share memory (an argument that is a view of another: an in-place kernel) are passed as
they are: copies would separate what the kernel reads from what it writes. So are tensors with no
elements and tensors that are not plain ``torch.Tensor`` (fake tensors never reach an interpreted launch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

#: Elements of guard before and after each tensor's span (a program's block past the end stays inside).
GUARD_ELEMENTS = 4096

#: Integer types of each element size: a guard is written and compared as the bits it is.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

#: NaN bit patterns to fill guards with, per floating dtype, none of them the NaN arithmetic produces
#: (except in fp8, which has too few NaNs: a computed NaN stored past an fp8 tensor goes unseen): each
#: tensor of a launch gets its own (the ``i``-th, cycling), so a value copied from one tensor's guard
#: into another's still counts as a stray write.
_NAN_PATTERNS = {
    torch.float64: [0x7FF8000000000001 + i for i in range(64)],
    torch.float32: [0x7FC00001 + i for i in range(64)],
    torch.float16: [0x7E01 + i for i in range(64)],
    torch.bfloat16: [0x7FC1 + i for i in range(62)],
    torch.float8_e4m3fn: [0x7F, 0xFF],
    torch.float8_e5m2: [0x7D, 0x7E, 0x7F, 0xFD, 0xFE],
}


def guard_pattern(dtype: torch.dtype, index: int) -> int:
    """The bits filling the guard of a launch's ``index``-th tensor of ``dtype``: a NaN for floating dtypes
    (the load of a guard shows in the output), a byte pattern otherwise."""
    patterns = _NAN_PATTERNS.get(dtype)
    if patterns is None:
        return {1: 0x5A, 2: 0x5A5A, 4: 0x5A5A5A5A, 8: 0x5A5A5A5A5A5A5A5A}[torch.empty((), dtype=dtype).element_size()]
    return patterns[index % len(patterns)]


class OutOfBoundsWrite(RuntimeError):
    """A kernel stored to memory outside every tensor it was given (a mask that lets a row or column past)."""


@dataclass
class _Fenced:
    """One tensor argument's guarded copy: the buffer, the copy inside it, and which elements are the tensor's."""

    original: torch.Tensor
    buffer: torch.Tensor  # the whole fenced memory, as integers of the element's size
    pattern: int  # what every element of ``buffer`` outside the tensor holds
    copy: torch.Tensor  # the original's shape, strides and values, inside ``buffer``
    owned: torch.Tensor  # bool per element of ``buffer``: True where an element of ``copy`` lies


def _span(tensor: torch.Tensor) -> int:
    """Elements from a tensor's first to its last, in its own strides (its storage offset aside)."""
    return 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))


def _distinct_elements(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` with every broadcast dimension (stride 0) reduced to one index: each element once."""
    for dim in range(tensor.dim()):
        if tensor.stride(dim) == 0 and tensor.shape[dim] > 1:
            tensor = tensor.narrow(dim, 0, 1)
    return tensor


def _fence(tensor: torch.Tensor, index: int) -> _Fenced:
    span = _span(tensor)
    elements = GUARD_ELEMENTS + span + GUARD_ELEMENTS
    bits = _BITS[tensor.element_size()]
    pattern = guard_pattern(tensor.dtype, index)  # below the sign bit for every size but one byte (unsigned)
    buffer = torch.full((elements,), pattern, dtype=bits, device=tensor.device)
    copy = buffer.view(tensor.dtype).as_strided(tensor.shape, tensor.stride(), GUARD_ELEMENTS)
    _distinct_elements(copy).copy_(_distinct_elements(tensor))
    owned = torch.zeros(elements, dtype=torch.bool, device=tensor.device)
    owned.as_strided(tensor.shape, tensor.stride(), GUARD_ELEMENTS).fill_(True)
    return _Fenced(tensor, buffer, pattern, copy, owned)


def _stray_writes(fenced: _Fenced) -> tuple[int, int, int]:
    """How many elements outside the tensor were written: before its first element, in the gaps of its
    strides, after its last element."""
    changed = (fenced.buffer != fenced.pattern) & ~fenced.owned
    first, last = GUARD_ELEMENTS, GUARD_ELEMENTS + _span(fenced.original) - 1
    where = torch.arange(changed.numel(), device=changed.device)
    return (
        int((changed & (where < first)).sum()),
        int((changed & (where >= first) & (where <= last)).sum()),
        int((changed & (where > last)).sum()),
    )


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The bytes of ``tensor``'s elements, in order (NaN compared as the bits it is)."""
    return tensor.contiguous().reshape(-1).view(torch.uint8)


def _describe(position: str, tensor: torch.Tensor) -> str:
    return f"argument {position} ({tensor.dtype}, shape {list(tensor.shape)}, strides {list(tensor.stride())})"


def _fenceable(value: Any) -> bool:
    return type(value) is torch.Tensor and value.numel() > 0


@contextmanager
def fenced_arguments(args: tuple, kwargs: dict[str, Any], kernel_name: str) -> Iterator[tuple[tuple, dict]]:
    """Yield ``(args, kwargs)`` with each plain tensor replaced by its guarded copy; on exit, check the
    guards and copy what the kernel wrote back into the originals.

    Raises:
        OutOfBoundsWrite: the kernel wrote outside a tensor it was given.
    """
    positions = [*((str(i), v) for i, v in enumerate(args)), *((repr(k), v) for k, v in kwargs.items())]
    tensors = [(position, value) for position, value in positions if _fenceable(value)]
    storages = [value.untyped_storage().data_ptr() for _, value in tensors]
    shared = {ptr for ptr in storages if storages.count(ptr) > 1}
    fences = {
        id(value): _fence(value, index)
        for index, (_, value) in enumerate(tensors)
        if value.untyped_storage().data_ptr() not in shared
    }
    swap = lambda value: fences[id(value)].copy if id(value) in fences else value  # noqa: E731
    yield tuple(swap(value) for value in args), {name: swap(value) for name, value in kwargs.items()}
    problems = []
    for position, value in tensors:
        fenced = fences.get(id(value))
        if fenced is None:
            continue
        before, gaps, after = _stray_writes(fenced)
        if before or gaps or after:
            places = [
                f"{n} {where}"
                for n, where in (
                    (before, "before its first element"),
                    (gaps, "between its elements (in the gaps of its strides)"),
                    (after, "after its last element"),
                )
                if n
            ]
            problems.append(f"{_describe(position, value)}: {', '.join(places)}")
        written, original = _distinct_elements(fenced.copy), _distinct_elements(value)
        if not torch.equal(_bytes(written), _bytes(original)):  # only what changed: an input keeps its version
            with torch.no_grad():
                original.copy_(written)
    if problems:
        raise OutOfBoundsWrite(
            f"kernel {kernel_name} wrote outside the tensors it was given (a store whose mask lets a row or a "
            f"column past the end through): {'; '.join(problems)}"
        )


def guarded_launch(launch: Callable[..., Any], kernel_name: str) -> Callable[..., Any]:
    """``launch`` (an interpreted ``kernel[grid]``) run on guarded copies of its tensor arguments."""

    def run(*args: Any, **kwargs: Any) -> Any:
        with fenced_arguments(args, kwargs, kernel_name) as (fenced_args, fenced_kwargs):
            return launch(*fenced_args, **fenced_kwargs)

    return run
