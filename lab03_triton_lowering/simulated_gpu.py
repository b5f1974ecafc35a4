"""Check the GPU half of the lab on a machine without a GPU (harness: do not edit).

Triton's interpreter runs kernels as NumPy code, so it accepts things the GPU compiler rejects (a
plain Python float read as a global, Python-only calls, types NumPy quietly promotes), and the CPU
lowering never exercises the CUDA replacement at all. Two checks close that gap, each in a fresh
process with the interpreter off and nothing ever launched:

``kernel``
    Triton gets a stand-in driver that reports a Hopper GPU (``sm_90``, as H100/H200), and every
    kernel launch becomes a compile-only warm-up. The lab's public ``layernorm_gelu`` is called on
    CPU tensors for several dtypes and row lengths, so each launch your launcher makes is compiled
    through Triton's whole pipeline (TTIR -> TTGIR -> LLVM IR -> PTX -> cubin with ``ptxas``).

``inductor``
    PyTorch's device queries are answered for the same simulated GPU, the test model
    :class:`~lab03_triton_lowering.models.FusableSites` is built in float16 on (fake) CUDA tensors,
    and Inductor compiles it with your lowering installed, up to its generated Python code. The
    check reads that code: every site must launch your Triton kernel (compiled *by Inductor*),
    not call an opaque operator.

Usage::

    python -m lab03_triton_lowering.simulated_gpu kernel      # LABKIT_IMPL=solution for the reference
    python -m lab03_triton_lowering.simulated_gpu inductor

Each prints what it found and exits 1 on failure. The simulation reaches into PyTorch internals of
the course's pinned version; it is a stand-in for a GPU, not a replacement for the ``gpu`` tests.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import types
from dataclasses import dataclass

#: The simulated GPU: Triton target (backend, compute capability, warp size) and device properties.
TARGET = ("cuda", 90, 32)
DEVICE_PROPERTIES = types.SimpleNamespace(
    name="simulated sm_90", major=9, minor=0, multi_processor_count=132, max_threads_per_multi_processor=2048,
    warp_size=32, regs_per_multiprocessor=65536, max_threads_per_block=1024, shared_memory_per_block_optin=232448,
    shared_memory_per_multiprocessor=233472, total_memory=80 * 2**30, L2_cache_size=50 * 2**20, gcnArchName="",
    uuid="simulated", clock_rate=1980000, memory_clock_rate=2619000, memory_bus_width=5120,
)
CHECKS = ("kernel", "inductor")


@dataclass(frozen=True)
class Case:
    """One call of ``layernorm_gelu`` whose kernel launches are compiled."""

    dtype: str
    shape: tuple[int, ...]
    affine: str  # "weight_and_bias", "weight_only" or "none"
    approximate: str

    def describe(self) -> str:
        return f"{self.dtype:<8} x{list(self.shape)!s:<13} {self.affine:<15} gelu={self.approximate}"


#: Single-tile and multi-tile rows, every dtype, both GELU forms, each affine form.
KERNEL_CASES = (
    Case("float32", (4, 100), "weight_and_bias", "none"),
    Case("float16", (2, 4096), "weight_only", "tanh"),
    Case("bfloat16", (2, 12288), "none", "none"),
    Case("float16", (3, 1), "weight_and_bias", "tanh"),
)


class CompileOnlyDriver:
    """A Triton driver for a GPU that is not there: enough for ``JITFunction.run`` to compile."""

    def __init__(self) -> None:
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget(*TARGET)

    def is_active(self) -> bool:
        return True

    def get_current_target(self):
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("cuda", 0)


def compile_instead_of_launching(record: list[str]) -> None:
    """Patch ``JITFunction.run`` so every launch compiles (``warmup=True``) and returns without running.

    The patch is on the class, so it catches launches however they are written
    (``wrap_triton(kernel)[grid](...)`` or ``kernel[grid](...)``) and whenever the module was imported.
    """
    from triton.runtime.jit import JITFunction

    original_run = JITFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        compiled = original_run(self, *args, grid=grid, warmup=True, **kwargs)
        signature = ", ".join(f"{k}: {v}" for k, v in compiled.src.signature.items() if v != "constexpr")
        record.append(f"{self.__name__} num_warps={compiled.metadata.num_warps} ({signature})")
        return compiled

    JITFunction.run = run


def simulate_cuda_device() -> None:
    """Answer PyTorch's and Inductor's device queries for the simulated GPU (no driver is touched)."""
    import torch
    import torch._inductor.scheduler as scheduler
    import torch.utils._triton as triton_utils
    from torch._dynamo.device_interface import get_interface_for_device

    torch.cuda.get_device_properties = lambda *args, **kwargs: DEVICE_PROPERTIES
    torch.cuda.get_device_capability = lambda *args, **kwargs: (DEVICE_PROPERTIES.major, DEVICE_PROPERTIES.minor)
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_name = lambda *args: DEVICE_PROPERTIES.name
    torch.cuda.is_bf16_supported = lambda *args, **kwargs: True
    scheduler.has_triton = triton_utils.has_triton = lambda: True
    cuda = get_interface_for_device("cuda")
    cuda.get_device_properties = staticmethod(lambda *args, **kwargs: DEVICE_PROPERTIES)
    cuda.Worker.get_device_properties = staticmethod(lambda *args, **kwargs: DEVICE_PROPERTIES)
    cuda.get_compute_capability = staticmethod(lambda *args, **kwargs: TARGET[1])
    cuda.current_device = staticmethod(lambda: 0)
    cuda.get_raw_stream = staticmethod(lambda *args: 0)
    cuda.raise_if_triton_unavailable = staticmethod(lambda *args, **kwargs: None)
    cuda.is_triton_capable = staticmethod(lambda *args, **kwargs: True)


def _inputs(case: Case):
    import torch

    dtype = getattr(torch, case.dtype)
    x = torch.randn(case.shape, dtype=dtype)
    n = case.shape[-1]
    weight = torch.randn(n, dtype=dtype) if case.affine != "none" else None
    bias = torch.randn(n, dtype=dtype) if case.affine == "weight_and_bias" else None
    return x, weight, bias


def check_kernel(lab) -> bool:
    """Compile every launch ``layernorm_gelu`` makes for :data:`KERNEL_CASES`; True if all compiled."""
    launches: list[str] = []
    compile_instead_of_launching(launches)
    print(f"compiling {lab.__name__}'s kernel launches for {TARGET[0]} sm_{TARGET[1]}")
    failures = 0
    for case in KERNEL_CASES:
        before = len(launches)
        try:
            lab.layernorm_gelu(*_inputs(case), eps=1e-5, approximate=case.approximate)
        except Exception as error:  # report every case, then fail
            failures += 1
            detail = str(error).strip() or repr(error)
            print(f"FAILED  {case.describe()}: {type(error).__name__}:\n        " + detail.replace("\n", "\n        "))
            continue
        if len(launches) == before:
            failures += 1
            print(f"FAILED  {case.describe()}: no Triton kernel was launched")
        for launch in launches[before:]:
            print(f"ok      {case.describe()}: {launch}")
    print(f"{len(KERNEL_CASES) - failures}/{len(KERNEL_CASES)} cases compiled for sm_{TARGET[1]}")
    return failures == 0


def _fake_cuda_model(dtype):
    """FusableSites with its parameters and an input moved to fake CUDA tensors."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from lab03_triton_lowering.models import FusableSites

    torch.manual_seed(0)
    model = FusableSites().to(dtype).eval()
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        for name, param in list(model.named_parameters()):
            owner, _, leaf = name.rpartition(".")
            fake = mode.from_tensor(param.detach()).to("cuda")
            setattr(model.get_submodule(owner), leaf, torch.nn.Parameter(fake, requires_grad=False))
        x = torch.empty(2, 5, 32, device="cuda", dtype=dtype)
    return model, x


def check_inductor(lab) -> bool:
    """Compile FusableSites for the simulated GPU with the lowering installed; True if Inductor inlined the kernel."""
    import torch
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.graph import GraphLowering

    from lab03_triton_lowering.models import FUSABLE_SITES

    simulate_cuda_device()
    codes: list[str] = []
    GraphLowering.save_output_code = staticmethod(codes.append)
    model, x = _fake_cuda_model(torch.float16)
    graph_module = torch.fx.symbolic_trace(model)
    print(f"compiling FusableSites (float16, simulated sm_{TARGET[1]}) with {lab.__name__}'s lowering")
    try:
        handle = lab.install_lowering()
    except Exception as error:
        print(f"FAILED: install_lowering raised {type(error).__name__}: {error}")
        return False
    try:
        with (
            torch.no_grad(),
            inductor_config.patch(shape_padding=False, compile_threads=1, fx_graph_cache=False),
            functorch_config.patch(enable_autograd_cache=False),
        ):
            compile_fx(graph_module, [x])
    except Exception as error:
        if not codes:  # failed before Inductor wrote its code: a real failure
            print(f"FAILED: Inductor did not finish compiling: {type(error).__name__}: {error}")
            return False
        # Loading the generated module needs a real GPU; the code is all this check reads.
    finally:
        lab.uninstall_lowering()
    code = "\n".join(codes)
    launches = re.findall(r"^\s*(layernorm_gelu_kernel_\d+\.run\(.*)$", code, flags=re.MULTILINE)
    opaque = re.findall(r"^\s*\w+ = (torch\.ops\.\w+\.layernorm_gelu\w*\.default\(.*)$", code, flags=re.MULTILINE)
    print(f"replacements counted by the handle: {handle.replacements} (sites: {len(FUSABLE_SITES)})")
    print(f"Triton kernel defined in Inductor's code: {'def layernorm_gelu_kernel(' in code}")
    for line in launches:
        print(f"  launch: {line}")
    for line in opaque:
        print(f"  opaque operator call (Inductor cannot see the kernel): {line}")
    problems = []
    if handle.replacements != len(FUSABLE_SITES):
        problems.append(f"{handle.replacements} sites replaced, expected {len(FUSABLE_SITES)}")
    if "def layernorm_gelu_kernel(" not in code or len(launches) != len(FUSABLE_SITES):
        problems.append(
            f"{len(launches)} launches of layernorm_gelu_kernel compiled by Inductor, expected {len(FUSABLE_SITES)}"
            " (on CUDA the replacement must trace the kernel launch, functionalized)"
        )
    if opaque:
        problems.append(f"{len(opaque)} sites call an operator instead of the kernel")
    for problem in problems:
        print(f"FAILED: {problem}")
    if not problems:
        print("ok: every site launches the Triton kernel that Inductor compiled")
    return not problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab03_triton_lowering.simulated_gpu",
                                     description="Compile the lab's kernel (kernel) or Inductor's code with the "
                                                 "lowering (inductor) for a simulated sm_90 GPU.")
    parser.add_argument("check", choices=CHECKS)
    argv = [parser.parse_args(sys.argv[1:] if argv is None else argv).check]
    if os.environ.get("TRITON_INTERPRET") != "0":
        # Kernels are decorated when the lab is imported: restart with the interpreter off.
        env = {**os.environ, "TRITON_INTERPRET": "0"}
        os.execve(sys.executable, [sys.executable, "-m", "lab03_triton_lowering.simulated_gpu", *argv], env)

    import triton

    from labkit.impl import load_lab

    triton.runtime.driver.set_active(CompileOnlyDriver())
    lab = load_lab("lab03_triton_lowering")
    passed = check_kernel(lab) if argv[0] == "kernel" else check_inductor(lab)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
