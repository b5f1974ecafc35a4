"""Check the GPU half of the lab on a machine without a GPU, and for real on one that has it (harness: do not edit).

Triton's interpreter runs kernels as NumPy code, so it accepts things the GPU compiler rejects (a
plain Python float read as a global, Python-only calls, types NumPy quietly promotes), and the CPU
lowering never exercises the CUDA replacement at all. Three checks close that gap, each in a fresh
process. Without a GPU they simulate one (nothing is ever launched on it); on a machine with a CUDA
GPU they run the real thing instead.

``kernel``
    Simulated: Triton gets a stand-in driver that reports a Hopper GPU (``sm_90``, as H100/H200),
    and every kernel launch becomes a compile-only warm-up. The lab's public ``layernorm_gelu`` is
    called for several dtypes and row lengths, so each launch your launcher makes is compiled
    through Triton's whole pipeline (TTIR -> TTGIR -> LLVM IR -> PTX -> cubin with ``ptxas``).
    Real GPU: the same cases run on CUDA tensors and must match ``F.gelu(F.layer_norm(...))``.

``inductor``
    Simulated: PyTorch's device queries are answered for the same GPU, the test model
    :class:`~lab03_triton_lowering.given.models.FusableSites` is built in float16 and bfloat16 on (fake)
    CUDA tensors, and Inductor compiles it with your lowering installed, up to its generated Python
    code. Real GPU: the model is compiled and run on CUDA. Either way the check reads that code:
    every site must launch your Triton kernel (compiled *by Inductor*), not call an opaque operator.

``attention``
    The optional extension's kernel (step 7), as ``kernel`` does the lab's: simulated, every launch
    ``fused_attention`` makes for :data:`ATTENTION_CASES` (both dtypes, causal or not, head dims on
    either side of a power of two) is compiled for sm_90; on a real GPU the cases run on CUDA and must
    match ``scaled_dot_product_attention``.

``fp8``
    The optional step 8's ``layernorm_gelu_fp8`` for :data:`FP8_CASES` (both FP8 formats, both output
    dtypes, one block and long rows), compiled for sm_90 (FP8 conversions need sm_89 or newer), or run
    on a real GPU against the float64 reference.

``cpu``
    The kernel on CPU tensors in a process that has a GPU (simulated: PyTorch reports a CUDA device,
    and any compiled launch raises). A GPU machine still runs the CPU tests, so CPU launches must
    take Triton's interpreter there too: launch through ``labkit.triton_env.kernel_for``.

Usage::

    python -m lab03_triton_lowering.given.simulated_gpu kernel
    python -m lab03_triton_lowering.given.simulated_gpu inductor
    python -m lab03_triton_lowering.given.simulated_gpu cpu
    python -m lab03_triton_lowering.given.simulated_gpu attention
    python -m lab03_triton_lowering.given.simulated_gpu fp8

Each prints what it found and exits 1 on failure; on an unfinished starter, one line naming the
handout step to finish first, and exit status 3 (:mod:`labkit.unfinished`). The simulation reaches
into PyTorch internals of the course's supported versions; it is a stand-in for a GPU, not a
replacement for the ``gpu`` tests.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass

from labkit.unfinished import stop_if_unfinished

#: The simulated GPU: Triton target (backend, compute capability, warp size) and device properties.
TARGET = ("cuda", 90, 32)
DEVICE_PROPERTIES = types.SimpleNamespace(
    name="simulated sm_90",
    major=9,
    minor=0,
    multi_processor_count=132,
    max_threads_per_multi_processor=2048,
    warp_size=32,
    regs_per_multiprocessor=65536,
    max_threads_per_block=1024,
    shared_memory_per_block_optin=232448,
    shared_memory_per_multiprocessor=233472,
    total_memory=80 * 2**30,
    L2_cache_size=50 * 2**20,
    gcnArchName="",
    uuid="simulated",
    clock_rate=1980000,
    memory_clock_rate=2619000,
    memory_bus_width=5120,
)
CHECKS = ("kernel", "inductor", "cpu", "attention", "fp8")
PACKAGE = "lab03_triton_lowering"
#: What an unfinished starter stops (:func:`labkit.unfinished.stop_if_unfinished`: one line, exit 3).
CHECK_NEEDS = "the simulated GPU check"
#: Half-precision dtypes the lowering must fire for on CUDA.
HALF_DTYPES = ("float16", "bfloat16")
#: How far the kernel may be from eager: fp32 within 1e-4; half precision within two units in the last place.
TOLERANCE = {
    "float32": dict(rtol=0.0, atol=1e-4),
    "float16": dict(rtol=2e-3, atol=1e-3),
    "bfloat16": dict(rtol=1.6e-2, atol=1e-2),
}


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


def refuse_compiled_launches() -> None:
    """Patch ``JITFunction.run`` so that any launch of a *compiled* kernel raises a clear error."""
    from triton.runtime.jit import JITFunction

    def run(self, *args, **kwargs):
        raise RuntimeError(
            f"{self.__name__}: a compiled kernel was launched on CPU tensors (on a GPU machine this fails with "
            "'Pointer argument cannot be accessed from Triton (cpu tensor?)'); launch through "
            "labkit.triton_env.kernel_for(kernel, x.device), which takes the interpreter for CPU tensors"
        )

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
    cuda.is_bf16_supported = staticmethod(lambda *args, **kwargs: True)


def _inputs(case: Case, device: str = "cpu"):
    import torch

    generator = torch.Generator().manual_seed(0)
    dtype = getattr(torch, case.dtype)
    x = torch.randn(case.shape, generator=generator).to(device, dtype)
    n = case.shape[-1]
    weight = torch.randn(n, generator=generator).to(device, dtype) if case.affine != "none" else None
    bias = torch.randn(n, generator=generator).to(device, dtype) if case.affine == "weight_and_bias" else None
    return x, weight, bias


def _matches_eager(lab, case: Case, device: str) -> str | None:
    """Run one case on ``device``; None when it matches eager (computed in fp32), else what went wrong."""
    import torch
    import torch.nn.functional as F

    x, weight, bias = _inputs(case, device)
    out = lab.layernorm_gelu(x, weight, bias, eps=1e-5, approximate=case.approximate)
    as_fp32 = lambda t: None if t is None else t.float()  # noqa: E731
    expected = F.gelu(
        F.layer_norm(x.float(), x.shape[-1:], as_fp32(weight), as_fp32(bias), 1e-5), approximate=case.approximate
    ).to(x.dtype)
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        return f"returned {tuple(out.shape)} {out.dtype} on {out.device}"
    if not torch.allclose(out.float(), expected.float(), **TOLERANCE[case.dtype]):
        return f"max |error| {(out.float() - expected.float()).abs().max().item():.3g}"
    return None


def check_kernel_on_gpu(lab) -> bool:
    """Run :data:`KERNEL_CASES` on the real GPU; True if every case matches eager."""
    import torch

    print(f"running {lab.__name__}'s kernel on {torch.cuda.get_device_name()}")
    return _run_cases(lab, KERNEL_CASES, "cuda")


def _run_cases(lab, cases: tuple[Case, ...], device: str) -> bool:
    """Run each case on ``device`` and print whether it matches eager; True if all do."""
    failures = 0
    for case in cases:
        try:
            problem = _matches_eager(lab, case, device)
        except Exception as error:  # report every case, then fail (a starter TODO: one line, exit 3)
            stop_if_unfinished(error, PACKAGE, CHECK_NEEDS)
            problem = f"{type(error).__name__}: {error}"
        failures += problem is not None
        print(f"{'FAILED ' if problem else 'ok     '} {case.describe()}{': ' + problem if problem else ''}")
    print(f"{len(cases) - failures}/{len(cases)} cases match eager on {device}")
    return failures == 0


def _print_failure(case: str, error: Exception) -> None:
    """Print a case that raised, with the error indented under it; a starter's TODO stops the check instead
    (one line naming the step, exit 3)."""
    stop_if_unfinished(error, PACKAGE, CHECK_NEEDS)
    detail = str(error).strip() or repr(error)
    print(f"FAILED  {case}: {type(error).__name__}:\n        " + detail.replace("\n", "\n        "))


def check_kernel(lab) -> bool:
    """Compile every launch ``layernorm_gelu`` makes for :data:`KERNEL_CASES`; True if all compiled."""
    from labkit import triton_env

    launches: list[str] = []
    compile_instead_of_launching(launches)
    triton_env.cpu_launches = "compiled"  # the CPU tensors stand in for the simulated GPU's
    print(f"compiling {lab.__name__}'s kernel launches for {TARGET[0]} sm_{TARGET[1]}")
    failures = 0
    for case in KERNEL_CASES:
        before = len(launches)
        try:
            lab.layernorm_gelu(*_inputs(case), eps=1e-5, approximate=case.approximate)
        except Exception as error:  # report every case, then fail (a starter TODO: one line, exit 3)
            failures += 1
            _print_failure(case.describe(), error)
            continue
        if len(launches) == before:
            failures += 1
            print(f"FAILED  {case.describe()}: no Triton kernel was launched")
        for launch in launches[before:]:
            print(f"ok      {case.describe()}: {launch}")
    print(f"{len(KERNEL_CASES) - failures}/{len(KERNEL_CASES)} cases compiled for sm_{TARGET[1]}")
    return failures == 0


#: CPU cases: single and multi-block rows, both GELU forms, every affine form.
CPU_CASES = (
    Case("float32", (4, 100), "weight_and_bias", "none"),
    Case("float32", (3, 1), "weight_only", "tanh"),
    Case("float32", (2, 20000), "none", "none"),
)


def check_cpu(lab, simulated: bool) -> bool:
    """Run :data:`CPU_CASES` on CPU tensors while a GPU is present (or simulated); True if all match eager."""
    import torch

    if simulated:
        torch.cuda.is_available = lambda: True
        torch.cuda.device_count = lambda: 1
        refuse_compiled_launches()
    where = "a simulated" if simulated else "this"
    print(f"running {lab.__name__}'s kernel on CPU tensors in a process with {where} GPU")
    return _run_cases(lab, CPU_CASES, "cpu")


#: The extension's launches to compile (simulated) or run (real GPU): ``(dtype, shape name in
#: checks.ATTENTION_SHAPES, causal)``.
ATTENTION_CASES = (
    ("float32", "seq_31_head_40", False),
    ("float16", "seq_65_head_128", True),
    ("float16", "queries_17_keys_70", False),
    ("float32", "queries_70_keys_17", True),
)


def check_attention(lab, simulated: bool) -> bool:
    """Compile (simulated) or run (real GPU) every :data:`ATTENTION_CASES` launch; True if all compiled or matched."""
    import torch

    from lab03_triton_lowering.given.checks import ATTENTION_SHAPES, assert_attention_matches, attention_inputs

    def call(dtype: str, shape: str, causal: bool) -> Callable[[], object]:
        q, k, v = attention_inputs(ATTENTION_SHAPES[shape], getattr(torch, dtype), "cpu" if simulated else "cuda")
        if simulated:
            return lambda: lab.fused_attention(q, k, v, causal=causal)
        return lambda: assert_attention_matches(lab, q, k, v, causal)

    cases = [(f"{dtype:<8} {shape:<20} causal={causal!s:<5}", call(dtype, shape, causal)) for dtype, shape, causal in
             ATTENTION_CASES]  # fmt: skip
    return _compile_or_run(f"{lab.__name__}'s fused_attention", cases, simulated, "match scaled_dot_product_attention")


#: The optional step 8's cases: (FP8 dtype, output dtype, shape): one block, long rows, one column.
FP8_CASES = (
    ("float8_e4m3fn", "float16", (4, 100)),
    ("float8_e5m2", "bfloat16", (2, 20000)),
    ("float8_e4m3fn", "bfloat16", (3, 1)),
)


def check_fp8(lab, simulated: bool) -> bool:
    """Compile (simulated) or run (real GPU) every :data:`FP8_CASES` launch of ``layernorm_gelu_fp8``."""
    import torch

    from lab03_triton_lowering.given.checks import assert_fp8_matches, fp8_inputs

    def call(fp8: str, out: str, shape: tuple[int, ...]) -> Callable[[], object]:
        q, scale = fp8_inputs(shape, getattr(torch, fp8), scale=0.25)
        if not simulated:
            q, scale = q.cuda(), scale.cuda()
        if simulated:
            return lambda: lab.layernorm_gelu_fp8(q, scale, out_dtype=getattr(torch, out))
        return lambda: assert_fp8_matches(lab, q, scale, out_dtype=getattr(torch, out))

    cases = [(f"{fp8:<14} -> {out:<9} {list(shape)!s:<11}", call(fp8, out, shape)) for fp8, out, shape in FP8_CASES]
    return _compile_or_run(f"{lab.__name__}'s layernorm_gelu_fp8", cases, simulated, "match the float64 reference")


def _compile_or_run(what: str, cases: list[tuple[str, Callable[[], object]]], simulated: bool, matched: str) -> bool:
    """Call each case's function; simulated, every Triton launch it makes compiles for sm_90 instead of
    running (a case that launches nothing fails). Every case is reported, then True if all passed."""
    import torch

    from labkit import triton_env

    launches: list[str] = []
    if simulated:
        compile_instead_of_launching(launches)
        triton_env.cpu_launches = "compiled"  # the CPU tensors stand in for the simulated GPU's
    where = f"{TARGET[0]} sm_{TARGET[1]}" if simulated else torch.cuda.get_device_name()
    print(f"{'compiling' if simulated else 'running'} {what} launches on {where}")
    failures = 0
    for case, call in cases:
        before = len(launches)
        try:
            call()
        except Exception as error:  # report every case, then fail (a starter TODO: one line, exit 3)
            failures += 1
            _print_failure(case, error)
            continue
        if simulated and len(launches) == before:
            failures += 1
            print(f"FAILED  {case}: no Triton kernel was launched")
            continue
        print(f"ok      {case}" + "".join(f": {launch}" for launch in launches[before:]))
    verdict = f"compiled for sm_{TARGET[1]}" if simulated else matched
    print(f"{len(cases) - failures}/{len(cases)} cases {verdict}")
    return failures == 0


def _fake_cuda_model(dtype):
    """FusableSites with its parameters and an input moved to fake CUDA tensors."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from lab03_triton_lowering.given.models import FusableSites

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


def _compile_simulated(model, x) -> list[str]:
    """Compile ``model`` with Inductor for the simulated GPU; return the generated code (nothing runs)."""
    import torch
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.graph import GraphLowering

    codes: list[str] = []
    GraphLowering.save_output_code = staticmethod(codes.append)
    try:
        with (
            inductor_config.patch(shape_padding=False, compile_threads=1, fx_graph_cache=False),
            functorch_config.patch(enable_autograd_cache=False),
        ):
            compile_fx(torch.fx.symbolic_trace(model), [x])
    except Exception:
        if not codes:  # failed before Inductor wrote its code: a real failure
            raise
        # Loading the generated module needs a real GPU; the code is all this check reads.
    return codes


def _compile_on_gpu(model, x) -> list[str]:
    """Compile and run ``model`` with default ``torch.compile`` on the real GPU; return the generated code."""
    import torch
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    _, codes = run_and_get_code(torch.compile(model), x)
    return codes


def _read_inductor_code(code: str, replaced: int) -> list[str]:
    """Print what Inductor generated for FusableSites; return the problems found."""
    from lab03_triton_lowering.given.models import FUSABLE_SITES

    launches = re.findall(r"^\s*(layernorm_gelu_kernel_\d+\.run\(.*)$", code, flags=re.MULTILINE)
    opaque = re.findall(r"^\s*\w+ = (torch\.ops\.\w+\.layernorm_gelu\w*\.default\(.*)$", code, flags=re.MULTILINE)
    print(f"  replacements counted by the handle: {replaced} (sites: {len(FUSABLE_SITES)})")
    print(f"  Triton kernel defined in Inductor's code: {'def layernorm_gelu_kernel(' in code}")
    for line in launches:
        print(f"  launch: {line}")
    for line in opaque:
        print(f"  opaque operator call (Inductor cannot see the kernel): {line}")
    problems = []
    if replaced != len(FUSABLE_SITES):
        problems.append(f"{replaced} sites replaced, expected {len(FUSABLE_SITES)}")
    if "def layernorm_gelu_kernel(" not in code or len(launches) != len(FUSABLE_SITES):
        problems.append(
            f"{len(launches)} launches of layernorm_gelu_kernel compiled by Inductor, expected {len(FUSABLE_SITES)}"
            " (on CUDA the replacement must trace the kernel launch, functionalized)"
        )
    if opaque:
        problems.append(f"{len(opaque)} sites call an operator instead of the kernel")
    return problems


def check_inductor(lab, simulated: bool) -> bool:
    """Compile FusableSites in every half dtype with the lowering installed; True if Inductor inlined the kernel."""
    import torch

    if simulated:
        simulate_cuda_device()
    where = f"simulated sm_{TARGET[1]}" if simulated else torch.cuda.get_device_name()
    try:
        handle = lab.install_lowering()
    except Exception as error:
        stop_if_unfinished(error, PACKAGE, CHECK_NEEDS)
        print(f"FAILED: install_lowering raised {type(error).__name__}: {error}")
        return False
    problems = []
    try:
        for dtype_name in HALF_DTYPES:
            dtype = getattr(torch, dtype_name)
            print(f"compiling FusableSites ({dtype_name}, {where}) with {lab.__name__}'s lowering")
            before = handle.replacements
            try:
                with torch.no_grad():
                    codes = (
                        _compile_simulated(*_fake_cuda_model(dtype))
                        if simulated
                        else _compile_on_gpu(*_gpu_model(dtype))
                    )
            except Exception as error:
                stop_if_unfinished(error, PACKAGE, CHECK_NEEDS)
                problems.append(f"{dtype_name}: Inductor did not finish compiling: {type(error).__name__}: {error}")
                continue
            problems += [
                f"{dtype_name}: {p}" for p in _read_inductor_code("\n".join(codes), handle.replacements - before)
            ]
    finally:
        lab.uninstall_lowering()
    for problem in problems:
        print(f"FAILED: {problem}")
    if not problems:
        print("ok: in every half dtype, every site launches the Triton kernel that Inductor compiled")
    return not problems


def _gpu_model(dtype):
    """FusableSites and an input on the real GPU."""
    import torch

    from lab03_triton_lowering.given.models import FusableSites

    torch.manual_seed(0)
    return FusableSites().to("cuda", dtype).eval(), torch.randn(2, 5, 32, device="cuda", dtype=dtype)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lab03_triton_lowering.given.simulated_gpu",
        description="Check the lab's kernel (kernel), Inductor's code with the lowering "
        "(inductor), CPU launches beside a GPU (cpu) and the extensions' attention kernel "
        "(attention) and FP8 input (fp8): on a simulated sm_90 "
        "GPU, or for real where CUDA is present.",
    )
    parser.add_argument("check", choices=CHECKS)
    argv = [parser.parse_args(sys.argv[1:] if argv is None else argv).check]
    if os.environ.get("TRITON_INTERPRET") == "1":
        # TRITON_INTERPRET=1 decorates every kernel interpreted at import: restart without it.
        env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
        os.execve(sys.executable, [sys.executable, "-m", "lab03_triton_lowering.given.simulated_gpu", *argv], env)

    import torch
    import triton

    from labkit.impl import load_lab

    simulated = not torch.cuda.is_available()
    if simulated and argv[0] != "cpu":
        triton.runtime.driver.set_active(CompileOnlyDriver())
    lab = load_lab("lab03_triton_lowering")
    if argv[0] == "kernel":
        passed = check_kernel(lab) if simulated else check_kernel_on_gpu(lab)
    elif argv[0] == "inductor":
        passed = check_inductor(lab, simulated)
    elif argv[0] == "attention":
        passed = check_attention(lab, simulated)
    elif argv[0] == "fp8":
        passed = check_fp8(lab, simulated)
    else:
        passed = check_cpu(lab, simulated)
    return 0 if passed else 1  # a starter TODO has exited 3 already, with one line naming the step


if __name__ == "__main__":
    sys.exit(main())
