"""Turn the kernel into PyTorch operators that ``torch.compile`` can trace and Inductor can call.  [YOU WRITE THIS]

A raw ``@triton.jit`` function is invisible to PyTorch's tracers: ``make_fx`` and Inductor see
tensors go in and nothing come out. Registering an *operator* gives the compiler what it needs:

- a **schema** (``(Tensor x, Tensor? weight, Tensor? bias, float eps, str approximate) -> Tensor``),
  inferred from the type hints, so the op can sit in an FX graph as one node;
- a **fake implementation** (``register_fake``): given fake tensors (shapes, dtypes, no data), return
  a fake result. Tracing runs this instead of the kernel;
- a **real implementation** per device.

Two registrations, one per device, because the two devices need different things:

- CPU: ``torch.library.custom_op`` (``device_types="cpu"``). Inductor treats it as opaque and calls
  it at run time; its body launches the kernel in Triton's interpreter, on real CPU tensors.
- CUDA: ``torch.library.triton_op``. Its body must only launch kernels through ``wrap_triton``;
  in exchange Inductor can look inside and compile the Triton kernel as part of the graph.
  (Under the interpreter this path cannot work: tracing would run the kernel on fake tensors.)
"""

import torch

from lab03_triton_lowering.given.interface import SUPPORTED_DTYPES  # noqa: F401  (given: the dtypes check_arguments accepts)

from .kernel import GELU_APPROXIMATIONS, layernorm_gelu_forward  # noqa: F401

#: Namespace of the operators: the package name, so the starter and the reference solution can be
#: imported in one process without registering the same operator name twice.
OP_NAMESPACE = __name__.rpartition(".")[0].replace(".", "_")

# TODO(step 1): register the CPU operator (layernorm_gelu calls it). TODO(step 4): its fake implementation
# and the CUDA operator. All at import time. Contract (the tests rely on it):
#
#   - f"{OP_NAMESPACE}::layernorm_gelu": a torch.library.custom_op, mutates_args=(), device_types="cpu", on
#     layernorm_gelu_cpu(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
#     eps: float, approximate: str) -> torch.Tensor, which runs layernorm_gelu_forward. The type hints ARE
#     the schema; keep this argument order (the tests read eps and approximate from the op calls in
#     Inductor's generated code). Step 1 needs it already: every CPU test calls layernorm_gelu, which
#     dispatches to this operator.
#   - its fake implementation (step 4): a new contiguous tensor with x's shape, dtype and device.
#   - f"{OP_NAMESPACE}::layernorm_gelu_cuda" (step 4): a torch.library.triton_op, mutates_args=(), same
#     signature, body layernorm_gelu_forward.
#
# guidance: begin
#   1. @torch.library.custom_op(f"{OP_NAMESPACE}::layernorm_gelu", mutates_args=(), device_types="cpu")
#      on  def layernorm_gelu_cpu(x, weight, bias, eps, approximate)  (with the type hints above),
#      returning layernorm_gelu_forward(x, weight, bias, eps, approximate).
#   2. @layernorm_gelu_cpu.register_fake on a function of the same arguments returning
#      torch.empty(x.shape, dtype=x.dtype, device=x.device), never reading data.
#   3. @torch.library.triton_op(f"{OP_NAMESPACE}::layernorm_gelu_cuda", mutates_args=()) on
#      layernorm_gelu_cuda, same body (triton_op uses the body as the fake implementation).
# guidance: end


def check_arguments(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, approximate: str
) -> None:
    """Raise a clear error for anything the kernel does not support.

    Every message names the argument that is wrong (``x``, ``weight``, ``bias``, ``eps``, ``approximate``);
    the tests check each error below.

    Raises:
        TypeError: ``x``, ``weight`` or ``bias`` is not a tensor of a supported dtype (name the
            dtype, e.g. "float64"), or ``eps`` is not a number (a string such as "1e-5" is not).
        ValueError: ``approximate`` is unknown, ``eps`` is negative, ``x`` is 0-d or not on CPU/CUDA
            (e.g. on ``meta``), or ``weight``/``bias`` do not have shape ``(x.shape[-1],)`` (name that
            length: "expected (16,)") or are not on ``x``'s device.
    """
    raise NotImplementedError("TODO(step 1): validate the arguments of layernorm_gelu")


def layernorm_gelu(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    approximate: str = "none",
) -> torch.Tensor:
    """``F.gelu(F.layer_norm(x, x.shape[-1:], weight, bias, eps), approximate=approximate)`` in one kernel.

    Args:
        x: ``(..., n)`` float32/float16/bfloat16 tensor on CPU (interpreted kernel) or CUDA; any strides.
        weight, bias: optional ``(n,)`` affine parameters on ``x``'s device.
        eps: added to the variance before the square root.
        approximate: ``"none"`` (exact, erf) or ``"tanh"``, as in ``F.gelu``.

    Returns:
        A new contiguous tensor with ``x``'s shape and dtype.

    Contract: validate with :func:`check_arguments`, then call the registered operator for x's
    device (``float(eps)``): the CUDA ``triton_op`` on CUDA, the CPU ``custom_op`` otherwise
    (fake CPU tensors included: that is how tracing reaches your fake implementation). Step 1
    needs the CPU ``custom_op`` registered (see above); the CUDA one comes in step 4.
    """
    raise NotImplementedError("TODO(step 1): validate, then dispatch to the operator registered for x's device")


def layernorm_gelu_replacement(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, approximate: str
) -> torch.Tensor:
    """What Inductor's pattern replacement traces in place of a LayerNorm -> GELU subgraph.

    It runs under ``make_fx`` on fake tensors, inside Inductor, after functionalization, so the
    graph it leaves must be functional. Contract:

    - CPU: call the CPU operator (one opaque node; Inductor emits a call to it).
    - CUDA: ``torch.func.functionalize(layernorm_gelu_forward)(x, weight, bias, eps, approximate)``:
      the launch itself, functionalized into ``triton_kernel_wrapper_functional`` (what a
      ``triton_op`` becomes under AOTAutograd), so Inductor compiles your kernel into its code.
      Calling the CUDA operator instead would leave an opaque call: correct, but no kernel for
      Inductor to see.
    """
    raise NotImplementedError("TODO(step 5): trace the fused op for x's device (the CUDA branch: step 6)")
