"""labkit.triton_env: one kernel, compiled for CUDA tensors and interpreted for CPU tensors, in one process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from labkit.labspec import COURSE_ROOT

#: A kernel that calls a @triton.jit helper and tl.sum (itself a @triton.jit function): what the
#: interpreter can only run when every function it reaches is interpreted too.
KERNEL = """import torch, triton, triton.language as tl
from labkit.triton_env import kernel_for

@triton.jit
def _double(v):
    return v * 2.0

@triton.jit
def row_sums(x_ptr, out_ptr, N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x = tl.load(x_ptr + row * N + tl.arange(0, N))
    tl.store(out_ptr + row, tl.sum(_double(x), axis=0))
"""


def run_script(folder: Path, code: str) -> subprocess.CompletedProcess:
    """:data:`KERNEL` then ``code``, as a script (Triton reads kernels' source) in a fresh process.

    ``TRITON_INTERPRET`` is unset, as a user's process starts; the course root is on the path.
    """
    script = folder / "script.py"
    script.write_text(KERNEL + textwrap.dedent(code))
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(COURSE_ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, str(script)], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )


def test_cpu_launches_take_the_interpreter_while_the_kernel_stays_compiled(tmp_path):
    result = run_script(
        tmp_path,
        """
        from triton.runtime.jit import JITFunction
        assert isinstance(row_sums, JITFunction), "decorated compiled: TRITON_INTERPRET is unset"
        x = torch.randn(4, 16); out = torch.empty(4)
        kernel_for(row_sums, x.device)[(4,)](x, out, N=16)
        torch.testing.assert_close(out, 2 * x.sum(1))
        print("ok")
    """,
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


def test_a_compiled_launch_after_an_interpreted_one_in_the_same_process(tmp_path):
    # The interpreter patches triton.language for every nested @triton.jit call and never restores it;
    # a kernel compiled afterwards in the same process (the GPU tests after the CPU tests, on a GPU
    # machine) was then built from interpreter functions. Compiled here for a simulated sm_90.
    result = run_script(
        tmp_path,
        """
        import labkit.triton_env as triton_env
        from lab03_triton_lowering.given.simulated_gpu import CompileOnlyDriver, compile_instead_of_launching
        x = torch.randn(4, 16); out = torch.empty(4)
        kernel_for(row_sums, "cpu")[(4,)](x, out, N=16)
        triton.runtime.driver.set_active(CompileOnlyDriver())
        launches = []
        compile_instead_of_launching(launches)
        triton_env.cpu_launches = "compiled"
        kernel_for(row_sums, "cpu")[(4,)](x, out, N=16)
        assert len(launches) == 1, launches
        print("ok")
    """,
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


def test_a_kernel_calling_tl_max_runs_interpreted_twice(tmp_path):
    # tl.max (triton.language.standard) reads the interpreter's globals, which the interpreter adds to
    # that module when it first rewrites tl.max and caches the rewrite: restoring the module after the
    # first launch must not delete them, or the second launch fails with a NameError.
    result = run_script(
        tmp_path,
        """
        @triton.jit
        def row_maxima(x_ptr, out_ptr, N: tl.constexpr):
            row = tl.program_id(0).to(tl.int64)
            x = tl.load(x_ptr + row * N + tl.arange(0, N))
            tl.store(out_ptr + row, tl.max(x, axis=0))

        x = torch.randn(4, 16); out = torch.empty(4)
        for launch in range(2):
            kernel_for(row_maxima, x.device)[(4,)](x, out, N=16)
            torch.testing.assert_close(out, x.amax(1))
        print("ok")
    """,
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


def test_cuda_launches_are_wrapped_for_tracers_only():
    # wrap_triton makes a launch traceable; run eagerly its wrapper costs ~0.1 ms of host time per call.
    import triton
    import triton.language as tl

    from labkit.triton_env import kernel_for

    @triton.jit
    def noop(x_ptr):
        pass

    assert kernel_for(noop, "cuda") is noop, "a plain eager launch needs no wrapper"
    with FakeTensorMode():
        traced = kernel_for(noop, torch.device("cuda"))
    assert traced is not noop and hasattr(traced, "kernel"), "under a dispatch mode the launch must be traceable"
    del tl
