"""Compile the kernels ``layernorm_gelu`` launches for a real GPU, on a machine without one (harness).

Triton's interpreter runs kernels as NumPy code, so it accepts things the GPU compiler rejects: a
plain Python float read as a global, Python-only calls, mismatched types that NumPy quietly
promotes. A kernel that passes every interpreted test can still fail to compile on the first GPU.

This check closes that gap without a GPU. In a process where the interpreter is off, it gives
Triton a stand-in driver that reports a Hopper GPU (``sm_90``, as H100/H200) and turns every kernel
launch into a compile-only warm-up. It then calls the lab's public ``layernorm_gelu`` on CPU
tensors for several dtypes and row lengths, so each launch your launcher makes is compiled through
Triton's whole pipeline (TTIR -> TTGIR -> LLVM IR -> PTX -> cubin; ``ptxas`` ships with Triton).
Nothing runs, so the outputs are meaningless; only compilation is checked.

Usage::

    python -m lab03_triton_lowering.compile_for_gpu      # LABKIT_IMPL=solution for the reference

Prints one line per case and exits 1 if any launch failed to compile or none was made.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

#: The GPU the kernels are compiled for: (backend, compute capability, warp size).
TARGET = ("cuda", 90, 32)


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
CASES = (
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


def _inputs(case: Case):
    import torch

    dtype = getattr(torch, case.dtype)
    x = torch.randn(case.shape, dtype=dtype)
    n = case.shape[-1]
    weight = torch.randn(n, dtype=dtype) if case.affine != "none" else None
    bias = torch.randn(n, dtype=dtype) if case.affine == "weight_and_bias" else None
    return x, weight, bias


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") != "0":
        # Kernels are decorated when the lab is imported: restart with the interpreter off.
        env = {**os.environ, "TRITON_INTERPRET": "0"}
        os.execve(sys.executable, [sys.executable, "-m", "lab03_triton_lowering.compile_for_gpu"], env)

    import triton

    from labkit.impl import load_lab

    triton.runtime.driver.set_active(CompileOnlyDriver())
    launches: list[str] = []
    compile_instead_of_launching(launches)
    lab = load_lab("lab03_triton_lowering")
    print(f"compiling {lab.__name__}'s kernels for {TARGET[0]} sm_{TARGET[1]} (no GPU needed, nothing runs)")

    failures = 0
    for case in CASES:
        before = len(launches)
        try:
            lab.layernorm_gelu(*_inputs(case), eps=1e-5, approximate=case.approximate)
        except Exception as error:  # report every case, then fail
            failures += 1
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            print(f"FAILED  {case.describe()}: {type(error).__name__}: {first_line}")
            detail = str(error).strip()
            if "\n" in detail:
                print("        " + detail.replace("\n", "\n        "))
            continue
        if len(launches) == before:
            failures += 1
            print(f"FAILED  {case.describe()}: no Triton kernel was launched")
            continue
        for launch in launches[before:]:
            print(f"ok      {case.describe()}: {launch}")
    print(f"{len(CASES) - failures}/{len(CASES)} cases compiled for sm_{TARGET[1]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
