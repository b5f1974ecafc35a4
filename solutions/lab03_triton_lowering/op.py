"""Turn the kernel into PyTorch operators that ``torch.compile`` can trace and Inductor can call.

A raw ``@triton.jit`` function is invisible to PyTorch's tracers: ``make_fx`` and Inductor see
tensors go in and nothing come out. Registering an *operator* gives the compiler what it needs:

- a **schema** (``(Tensor x, Tensor? weight, Tensor? bias, float eps, str approximate) -> Tensor``),
  inferred from the type hints, so the op can sit in an FX graph as one node;
- a **fake implementation** (``register_fake``): given fake tensors (shapes, dtypes, no data), return
  a fake result. Tracing runs this instead of the kernel;
- a **real implementation** per device.

Two registrations, one per device, because the two devices need different things:

- CPU: ``torch.library.custom_op``. Inductor treats it as opaque and calls it at run time; its body
  launches the kernel in Triton's interpreter (``TRITON_INTERPRET=1``), on real CPU tensors.
- CUDA: ``torch.library.triton_op``. Its body must only launch kernels through ``wrap_triton``;
  in exchange Inductor can look inside and compile the Triton kernel as part of the graph.
  (Under the interpreter this path cannot work: tracing would run the kernel on fake tensors.)
"""

import torch

from lab03_triton_lowering.given.interface import SUPPORTED_DTYPES
from labkit.triton_env import traced

from .kernel import GELU_APPROXIMATIONS, layernorm_gelu_forward

#: Namespace of the operators: the package name, so the starter and the reference solution can be
#: imported in one process without registering the same operator name twice.
OP_NAMESPACE = __name__.rpartition(".")[0].replace(".", "_")


@torch.library.custom_op(f"{OP_NAMESPACE}::layernorm_gelu", mutates_args=(), device_types="cpu")
def layernorm_gelu_cpu(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, approximate: str
) -> torch.Tensor:
    """CPU implementation: the kernel run by Triton's interpreter."""
    return layernorm_gelu_forward(x, weight, bias, eps, approximate)


@layernorm_gelu_cpu.register_fake
def _layernorm_gelu_fake(x, weight, bias, eps, approximate):
    # Same shape, dtype and device as x; contiguous, like the real output.
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.triton_op(f"{OP_NAMESPACE}::layernorm_gelu_cuda", mutates_args=())
def layernorm_gelu_cuda(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, approximate: str
) -> torch.Tensor:
    """CUDA implementation: a compiled kernel launch that ``torch.compile`` can see into.

    ``triton_op`` registers this function as the fake implementation too (it only allocates and
    launches through ``wrap_triton``, which fake tensors can trace).
    """
    return layernorm_gelu_forward(x, weight, bias, eps, approximate)


def check_arguments(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, approximate: str
) -> None:
    """Raise a clear error for anything the kernel does not support.

    Every message names the argument that is wrong (``x``, ``weight``, ``bias``, ``eps``, ``approximate``).

    Raises:
        TypeError: ``x``, ``weight`` or ``bias`` is not a tensor of a supported dtype (naming the dtype),
            or ``eps`` is not a number.
        ValueError: ``approximate`` is unknown, ``eps`` is negative, ``x`` is 0-d or not on CPU/CUDA,
            or ``weight``/``bias`` do not have shape ``(x.shape[-1],)`` (naming that length) on ``x``'s device.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"x has dtype {x.dtype}; layernorm_gelu supports {', '.join(map(str, SUPPORTED_DTYPES))}")
    if x.dim() == 0:
        raise ValueError("x is 0-d: it must have at least one dimension (the normalised one)")
    if x.device.type not in ("cpu", "cuda"):
        raise ValueError(f"x is on {x.device}; layernorm_gelu runs on CPU (interpreter) or CUDA")
    if approximate not in GELU_APPROXIMATIONS:
        raise ValueError(f"approximate={approximate!r}: expected one of {GELU_APPROXIMATIONS}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"eps must be a number, got {type(eps).__name__}")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    for name, param in (("weight", weight), ("bias", bias)):
        if param is None:
            continue
        if not isinstance(param, torch.Tensor):
            raise TypeError(f"{name} must be a tensor or None, got {type(param).__name__}")
        if param.dtype not in SUPPORTED_DTYPES:
            raise TypeError(
                f"{name} has dtype {param.dtype}; layernorm_gelu supports {', '.join(map(str, SUPPORTED_DTYPES))}"
            )
        if tuple(param.shape) != (x.shape[-1],):
            raise ValueError(
                f"{name} has shape {tuple(param.shape)}; expected ({x.shape[-1]},) to match x's last dimension"
            )
        if param.device != x.device:
            raise ValueError(f"{name} is on {param.device} but x is on {x.device}")


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
    """
    check_arguments(x, weight, bias, eps, approximate)
    if x.device.type == "cuda":
        if _plain_eager_call(x, weight, bias):
            # Nothing traces this call and nothing needs autograd: launch directly. Going through
            # the operator costs the dispatcher's round trip (tens of microseconds of host time per
            # call), more than the kernel itself takes on small inputs.
            return layernorm_gelu_forward(x, weight, bias, float(eps), approximate)
        return layernorm_gelu_cuda(x, weight, bias, float(eps), approximate)
    return layernorm_gelu_cpu(x, weight, bias, float(eps), approximate)


def _plain_eager_call(*tensors: torch.Tensor | None) -> bool:
    """True when no compiler, tracer or autograd needs to see this call as an operator.

    That is: not under ``torch.compile``, no dispatch mode active (``make_fx``, fake tensors,
    functionalization), only plain tensors, and no gradient to record.
    """
    if traced():
        return False
    grad = torch.is_grad_enabled()
    return all(t is None or (type(t) is torch.Tensor and not (grad and t.requires_grad)) for t in tensors)


def layernorm_gelu_replacement(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, approximate: str
) -> torch.Tensor:
    """What Inductor's pattern replacement traces in place of a LayerNorm -> GELU subgraph.

    It runs under ``make_fx`` on fake tensors, after Inductor's functionalization, so the graph it
    leaves must be functional:

    - CPU: one node calling the opaque CPU operator (Inductor emits a call to it).
    - CUDA: the kernel launch itself, functionalized: ``triton_kernel_wrapper_functional``, the
      same node ``triton_op`` becomes when AOTAutograd traces it. Inductor then compiles the
      kernel into its generated code. (Calling ``layernorm_gelu_cuda`` here would leave an opaque
      op node: correct, but Inductor would only see a call, not the kernel.)
    """
    if x.device.type == "cuda":
        return torch.func.functionalize(layernorm_gelu_forward)(x, weight, bias, eps, approximate)
    return layernorm_gelu_cpu(x, weight, bias, eps, approximate)
