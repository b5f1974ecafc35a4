"""Make Triton kernels runnable on machines without a GPU.

Triton's interpreter (``TRITON_INTERPRET=1``) runs kernels one program at a time with NumPy on CPU
tensors. Triton reads the variable when a kernel is *decorated*, so it must be set before any module
defining ``@triton.jit`` kernels is imported. The pytest plugin and lab 3's package both call
:func:`use_interpreter_without_cuda` first thing.
"""

from __future__ import annotations

import os

INTERPRET_ENV_VAR = "TRITON_INTERPRET"


def use_interpreter_without_cuda() -> bool:
    """Set ``TRITON_INTERPRET=1`` when no CUDA device is present and the variable is unset.

    Returns:
        True when kernels will run in the interpreter.
    """
    if INTERPRET_ENV_VAR not in os.environ:
        import torch

        if not torch.cuda.is_available():
            os.environ[INTERPRET_ENV_VAR] = "1"
    return os.environ.get(INTERPRET_ENV_VAR) == "1"
