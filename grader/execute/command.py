"""The command line and the environment of a graded pytest process.

The environment is built from an allowlist, never copied whole: the grader's own variables (a token,
a password, the instructor's ``PYTHONPATH``) stay out of reach of the code under test, and nothing
the caller's shell sets (``PYTEST_ADDOPTS``, ``PYTHONSTARTUP``...) changes how pytest runs it.
"""

from __future__ import annotations

import os
from pathlib import Path

GPU_MODES = ("auto", "on", "off")
#: Variables taken from the grader's environment when set: where programs and libraries are, the
#: locale, the GPUs this grading may use, and thread counts the instructor chose.
PASSED_THROUGH = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "OMP_NUM_THREADS",
    "TORCHINDUCTOR_COMPILE_THREADS",
    "CC",
    "CXX",
)
#: pytest-json-report sections the grader never reads (captured streams can be megabytes).
REPORT_OMIT = ("collectors", "log", "streams", "traceback", "keywords", "warnings")
#: The probe plugin's module, loaded with ``-p``.
PROBE_PLUGIN = "grader.execute.probe"


def pytest_env(
    pythonpath: Path, gpu: str, threads: int | None = None, *, state: Path | None = None, cold_caches: bool = False
) -> dict[str, str]:
    """The environment of a graded pytest process.

    Args:
        pythonpath: the sandbox, first on ``sys.path`` (it shadows the course's editable install).
        gpu: ``off`` hides CUDA (GPU tests skip: pending) and runs Triton kernels in its interpreter.
        threads: PyTorch's thread pools (``OMP_NUM_THREADS``, ``TORCHINDUCTOR_COMPILE_THREADS``);
            None keeps the caller's.
        state: a folder the process may write, kept for the submission's later processes (home,
            compiler caches); None keeps the caller's ``HOME`` (the pristine course's collection).
        cold_caches: turn TorchInductor's caches off (every compile from scratch).
    """
    if gpu not in GPU_MODES:
        raise ValueError(f"gpu={gpu!r}: expected one of {', '.join(GPU_MODES)}")
    env = {key: os.environ[key] for key in PASSED_THROUGH if key in os.environ}
    env.setdefault("PATH", os.defpath)
    # PYTHONNOUSERSITE: no user site-packages, where a graded process could leave code (a .pth, a
    # sitecustomize) that the submission's next process would run before the grader's probe.
    env.update(
        PYTHONPATH=str(pythonpath),
        LABKIT_IMPL="student",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONHASHSEED="0",
        PYTHONNOUSERSITE="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    if state is not None:
        env.update(
            HOME=str(state / "home"),
            XDG_CACHE_HOME=str(state / "cache"),
            TORCHINDUCTOR_CACHE_DIR=str(state / "cache" / "inductor"),
            TRITON_CACHE_DIR=str(state / "cache" / "triton"),
            MPLCONFIGDIR=str(state / "cache" / "matplotlib"),
            HYPOTHESIS_STORAGE_DIRECTORY=str(state / "hypothesis"),
        )
    elif "HOME" in os.environ:
        env["HOME"] = os.environ["HOME"]
    if cold_caches:
        env["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
    # OpenMP threads that wait for each other sleep instead of spinning. By default (ACTIVE) a thread
    # whose sibling was descheduled by a busy machine spins at full speed until it returns: that is
    # CPU time the submission never asked for, and the CPU limits would measure the node again (a
    # MobileNetV2 forward: 0.22 s of CPU on an idle machine, 8.0 s beside 3 busy processes per core).
    env["OMP_WAIT_POLICY"] = "PASSIVE"
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


def pytest_command(python: str, targets: list[str], root: Path, *extra: str) -> list[str]:
    """``python -m pytest TARGETS`` with the grader's probe and no cache writes."""
    return [python, "-m", "pytest", *targets, "-p", "no:cacheprovider", "-p", PROBE_PLUGIN, *config_args(root), *extra]
