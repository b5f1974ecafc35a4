"""labkit.guard_bands: every interpreted launch sees its tensors fenced by NaN, and a stray store raises."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from labkit.guard_bands import OutOfBoundsRead, OutOfBoundsWrite, fenced_arguments
from labkit.triton_env import kernel_for


@triton.jit
def two_rows_per_program(x_ptr, out_ptr, N: tl.constexpr):
    """Copies rows 2p and 2p+1 with no row mask: the mistake of a launcher that rounds the rows up."""
    rows = tl.program_id(0) * 2 + tl.arange(0, 2)
    cols = tl.arange(0, N)
    offsets = rows[:, None] * N + cols[None, :]
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))


@triton.jit
def row_sums(x_ptr, row_stride, out_ptr, n_cols, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    """Sums each row of a ``[rows, n_cols]`` view whose rows are ``row_stride`` apart (``MASKED``: as it should)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    if MASKED:
        x = tl.load(x_ptr + row * row_stride + cols, mask=cols < n_cols, other=0.0)
    else:
        x = tl.load(x_ptr + row * row_stride + cols)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@triton.jit
def copy_rows_masked_on_input(x_ptr, out_ptr, n_rows, N: tl.constexpr):
    """Two rows per program; the load is masked to the real rows, the store is not."""
    rows = tl.program_id(0) * 2 + tl.arange(0, 2)
    offsets = rows[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=rows[:, None] < n_rows, other=0.0))


@triton.jit
def add_one_through_a_tuple(x_ptr, pointers, N: tl.constexpr):
    cols = tl.arange(0, N)
    tl.store(pointers[0] + cols, tl.load(x_ptr + cols) + 1.0)


@triton.jit
def scale_copy(x_ptr, scale_ptr, out_ptr, n, N: tl.constexpr):
    cols = tl.arange(0, N)
    x = tl.load(x_ptr + cols, mask=cols < n, other=0.0)
    tl.store(out_ptr + cols, x * tl.load(scale_ptr), mask=cols < n)


@triton.jit
def add_one(x_ptr, out_ptr, N: tl.constexpr):
    cols = tl.arange(0, N)
    tl.store(out_ptr + cols, tl.load(x_ptr + cols) + 1.0)


def test_a_store_past_the_last_row_raises_and_names_the_argument():
    """Three rows, two per program: the second program stores a fourth row past the output's end. Unfenced,
    the interpreter writes into the heap (a crash later, elsewhere, or nothing at all)."""
    x, out = torch.randn(3, 16), torch.empty(3, 16)
    with pytest.raises(
        OutOfBoundsRead,
        match=r"a load of 16 element\(s\).*1 element\(s\) past the last element of "
        r"argument 0 \(torch.float32, shape \[3, 16\]",
    ):
        kernel_for(two_rows_per_program, x.device)[(2,)](x, out, N=16)


def test_a_store_far_past_the_end_is_stopped_before_it_lands():
    """Rows of 8192, two rows per program, three programs: the stray rows start 8192 elements past the end, beyond
    any guard band. The address check refuses the store itself (the heap is never written)."""
    x, out = torch.randn(2, 8192), torch.empty(2, 8192)
    with pytest.raises(OutOfBoundsWrite, match=r"a store of 16384 element\(s\).*past the last element of argument 1"):
        kernel_for(copy_rows_masked_on_input, x.device)[(2,)](x, out, 2, N=8192)


def test_a_load_past_the_tensors_end_raises():
    """Rows of 40 read in blocks of 64 without a mask: the last row reads 24 elements past the tensor."""
    x, out = torch.randn(3, 40), torch.empty(3)
    with pytest.raises(OutOfBoundsRead, match=r"a load of 24 element\(s\).*past the last element of argument 0"):
        kernel_for(row_sums, x.device)[(3,)](x, x.stride(0), out, 40, BLOCK=64, MASKED=False)
    kernel_for(row_sums, x.device)[(3,)](x, x.stride(0), out, 40, BLOCK=64, MASKED=True)
    torch.testing.assert_close(out, x.sum(1))


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(4, 64)[:, :40],  # rows 64 apart: 24 unowned elements after each row
        lambda: torch.randn(1, 40).expand(4, 40),  # a broadcast row: stride 0
        lambda: torch.randn(4, 40),
    ],
    ids=["row_slice", "expanded", "contiguous"],
)
def test_a_correct_kernel_is_unchanged_by_the_fences(make):
    x = make()
    out = torch.empty(x.shape[0])
    version = x._version
    kernel_for(row_sums, x.device)[(x.shape[0],)](x, x.stride(0), out, 40, BLOCK=64, MASKED=True)
    torch.testing.assert_close(out, x.sum(1))
    assert x._version == version, "an input the kernel did not write is not written back"


def test_a_row_slice_masked_only_past_the_block_reads_the_gaps_as_nan():
    """Rows 64 apart but 40 long, read 64 at a time: a kernel that forgets the row length reads the 24 elements
    between rows. Unfenced they are the bigger tensor's finite values; fenced they are NaN."""
    x, out = torch.randn(4, 64)[:, :40], torch.empty(4)
    kernel_for(row_sums, x.device)[(3,)](x, x.stride(0), out, 64, BLOCK=64, MASKED=True)  # not the last row
    assert out[:3].isnan().all(), "the gaps between rows read as NaN"
    with pytest.raises(OutOfBoundsRead, match="24 element"):  # the last row's gap lies past the tensor's end
        kernel_for(row_sums, x.device)[(4,)](x, x.stride(0), out, 64, BLOCK=64, MASKED=True)


def test_tensors_that_share_memory_are_passed_as_they_are():
    """An in-place launch (the same tensor as input and output): separate copies would lose the write."""
    x = torch.zeros(16)
    kernel_for(add_one, x.device)[(1,)](x, x, N=16)
    assert torch.equal(x, torch.ones(16))


def test_fenced_arguments_leave_everything_but_plain_tensors_alone():
    empty, plain = torch.empty(0), torch.randn(3)
    with fenced_arguments((empty, 5, None, plain), {"scale": 2.0}, "k") as (args, kwargs):
        assert args[0] is empty and args[1:3] == (5, None) and kwargs == {"scale": 2.0}
        assert args[3] is not plain and torch.equal(args[3], plain)
        assert args[3].untyped_storage().nbytes() > plain.untyped_storage().nbytes(), "fenced: a bigger buffer"


@pytest.mark.parametrize(
    "dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2]
)
def test_every_guard_of_a_floating_tensor_is_a_nan_that_arithmetic_does_not_make(dtype):
    from labkit.guard_bands import _BITS, guard_pattern

    size = torch.empty((), dtype=dtype).element_size()
    made = torch.tensor([float("nan"), float("inf") - float("inf")]).to(dtype).view(_BITS[size]).tolist()
    for index in range(3):
        pattern = guard_pattern(dtype, index)
        assert torch.tensor([pattern], dtype=_BITS[size]).view(dtype).float().isnan().all(), (dtype, hex(pattern))
        if size > 1:  # fp8 has two NaNs (e4m3fn) or six (e5m2), arithmetic's among them: a stray NaN store is missed
            assert pattern not in made, (dtype, hex(pattern))
    assert guard_pattern(dtype, 0) != guard_pattern(dtype, 1), "two tensors of a launch have different guards"


def test_aliases_through_a_tuple_keep_the_kernels_write():
    """The same tensor as a plain argument and inside a tuple: one buffer, as it was (not two copies)."""
    x = torch.zeros(16)
    kernel_for(add_one_through_a_tuple, x.device)[(1,)](x, (x,), N=16)
    assert torch.equal(x, torch.ones(16))


@pytest.mark.parametrize(
    "scale",
    [
        lambda: torch.randn(1, 8)[:, 0],  # one element, stride 8
        lambda: torch.tensor([2.0]).expand(16),  # a broadcast scale: stride 0
        lambda: torch.nn.Parameter(torch.tensor([2.0])),
    ],
    ids=["one_element_stride_8", "expanded", "parameter"],
)
def test_odd_but_valid_tensors_launch_as_before(scale):
    s = scale()
    x, out = torch.randn(10), torch.empty(10)
    kernel_for(scale_copy, x.device)[(1,)](x, s, out, 10, N=16)
    torch.testing.assert_close(out, x * s.detach().reshape(-1)[0])


def test_a_parameter_is_checked_like_any_tensor():
    weight = torch.nn.Parameter(torch.randn(10))
    with pytest.raises(OutOfBoundsRead, match="argument 0"):
        kernel_for(add_one, weight.device)[(1,)](weight, torch.empty(16), N=16)


def test_views_of_one_packed_tensor_are_fenced_apart():
    """k and v sliced from one packed tensor share no element: each gets its own fence, so a read past k's
    columns reads NaN (in the packed tensor it would be v's finite values)."""
    packed = torch.randn(4, 64)
    k, v, out = packed[:, :40], packed[:, 40:], torch.empty(4)
    kernel_for(row_sums, k.device)[(3,)](k, k.stride(0), out, 64, BLOCK=64, MASKED=True)  # v not passed
    assert out[:3].isnan().all()
    with fenced_arguments((k, v), {}, "k") as (args, _):
        assert args[0] is not k and args[1] is not v, "no shared element: both fenced"


def test_an_inference_tensor_output_is_written_back():
    with torch.inference_mode():
        x, out = torch.zeros(16), torch.empty(16)
    kernel_for(add_one, x.device)[(1,)](x, out, N=16)
    assert torch.equal(out, torch.ones(16))


@triton.jit
def atomic_add_at(out_ptr, OFFSET: tl.constexpr):
    tl.atomic_add(out_ptr + OFFSET, 1.0)


@triton.jit
def rows_read_with_twice_their_stride(x_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr, TILES: tl.constexpr):
    row = tl.program_id(0)
    for tile in range(0, TILES):
        cols = tile * BLOCK + tl.arange(0, BLOCK)
        inside = cols < n_cols
        x = tl.load(x_ptr + row * row_stride + cols, mask=inside, other=0.0)
        tl.store(out_ptr + row * n_cols + cols, x, mask=inside)


def test_an_atomic_outside_every_tensor_raises_before_it_lands():
    """Atomics bypass the interpreter's load and store: a stray one a million elements away segfaulted."""
    out = torch.zeros(1)
    kernel_for(atomic_add_at, out.device)[(1,)](out, OFFSET=0)
    assert out.item() == 1.0
    with pytest.raises(OutOfBoundsWrite, match=r"an atomic of 1 element\(s\).*past the last element of argument 0"):
        kernel_for(atomic_add_at, out.device)[(1,)](out, OFFSET=1 << 20)


def test_an_overrun_by_a_whole_row_lands_in_the_tensors_own_guard():
    """Rows of 65537 read with twice their stride: the last row starts 65537 elements past the tensor, beyond a
    fixed 4096-element guard, where the next argument's copy may lie (its address would pass). The guard is as
    long as the tensor, so the read lands in it."""
    x, out = torch.randn(3, 65537), torch.zeros(3, 65537)
    with pytest.raises(OutOfBoundsRead, match="argument 0"):
        kernel_for(rows_read_with_twice_their_stride, x.device)[(3,)](x, out, 65537, 2 * 65537, BLOCK=8192, TILES=9)


def test_launches_from_several_threads_are_checked_each_against_its_own_tensors():
    import threading

    errors = []

    def launch_a_few() -> None:
        try:
            for _ in range(4):
                x, out = torch.randn(16), torch.empty(16)
                kernel_for(add_one, x.device)[(1,)](x, out, N=16)
                assert torch.equal(out, x + 1)
        except Exception as error:  # noqa: BLE001  (collected, then reported by the assertion below)
            errors.append(repr(error))

    threads = [threading.Thread(target=launch_a_few) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_a_host_tensor_descriptors_base_is_addressed_and_passed_as_it_is():
    descriptors = pytest.importorskip("triton.tools.tensor_descriptor")
    x, out = torch.randn(8, 16), torch.zeros(8, 16)
    kernel_for(copy_by_descriptor, x.device)[(2,)](
        descriptors.TensorDescriptor.from_tensor(x, [4, 16]),
        descriptors.TensorDescriptor.from_tensor(out, [4, 16]),
        BM=4,
    )
    assert torch.equal(out, x)


@triton.jit
def copy_by_descriptor(x_desc, out_desc, BM: tl.constexpr):
    row = tl.program_id(0) * BM
    out_desc.store([row, 0], x_desc.load([row, 0]))
