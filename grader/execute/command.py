"""The command line and environment of a graded pytest process."""

from __future__ import annotations

import os
from pathlib import Path

GPU_MODES = ("auto", "on", "off")



#: Environment variables that would let the caller's shell change how pytest runs the student's code.
SCRUBBED_ENV = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME", "LABKIT_IMPL")



#: pytest-json-report sections the grader never reads (captured streams can be megabytes).
REPORT_OMIT = ("collectors", "log", "streams", "traceback", "keywords", "warnings")



def pytest_env(pythonpath: Path, gpu: str, threads: int | None = None) -> dict[str, str]:
    """The environment of a graded pytest process (see the module docstring); ``threads`` sizes PyTorch's pools."""
    if gpu not in GPU_MODES:
        raise ValueError(f"gpu={gpu!r}: expected one of {', '.join(GPU_MODES)}")
    env = {key: value for key, value in os.environ.items() if key not in SCRUBBED_ENV}
    env.update(
        PYTHONPATH=str(pythonpath),
        LABKIT_IMPL="student",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONHASHSEED="0",
    )
    if threads is not None:
        env["OMP_NUM_THREADS"] = env["TORCHINDUCTOR_COMPILE_THREADS"] = str(threads)
    if gpu == "off":
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["TRITON_INTERPRET"] = "1"  # kernels run in Triton's CPU interpreter, as on a student laptop
    return env



def config_args(root: Path) -> list[str]:
    """Pin pytest's rootdir and config file to the course copy, whatever sits above it on disk."""
    config = root / "pyproject.toml"
    return ["--rootdir", str(root), "-c", str(config) if config.is_file() else os.devnull]



def pytest_command(python: str, package: str, root: Path, *extra: str) -> list[str]:
    """``python -m pytest <package>`` with the grader's plugin and no cache writes."""
    return [python, "-m", "pytest", package, "-p", "no:cacheprovider", "-p", "grader.execute.probe",
            *config_args(root), *extra]
