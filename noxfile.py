"""Nox sessions for the course.

Students:       nox -s lab01 lab02 lab03          (your code, CPU)
Reference:      nox -s lab01 -- --impl=solution   or   nox -s solutions
Instructors:    nox -s grade                      (grade the reference and the untouched starters)
Course CI:      nox -s tests                      (the project's own test suite)
Benchmarks:     nox -s bench-lab01 bench-lab02 bench-lab03
GPU:            nox -s gpu                        (GPU tests + lab 3 benchmark; skips without CUDA)

All sessions share ONE environment (``.nox/course-env``): PyTorch is ~5 GB, so it is installed once
and reinstalled only when ``pyproject.toml`` changes. Arguments after ``--`` go to pytest (or to the
script a session runs).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
SHARED_ENV = ROOT / ".nox" / "course-env"
LABS = {"lab01": "lab01_fx_passes", "lab02": "lab02_npu_backend", "lab03": "lab03_triton_lowering"}
PROJECT_TESTS = ["labkit/tests", "grader/tests"]

nox.options.sessions = ["lab01", "lab02", "lab03"]
nox.options.error_on_missing_interpreters = True


def _bin(name: str) -> str:
    folder = "Scripts" if sys.platform == "win32" else "bin"
    return str(SHARED_ENV / folder / name)


def course_python(session: nox.Session) -> str:
    """Create the shared environment on first use (or when pyproject.toml changed) and return its python."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    stamp = SHARED_ENV / f".installed-{digest}"
    python = _bin("python")
    if not stamp.exists():
        if not Path(python).exists():
            session.log(f"creating the shared course environment in {SHARED_ENV}")
            session.run(sys.executable, "-m", "venv", str(SHARED_ENV), external=True)
        session.log("installing the course (torch is large: the first install takes a few minutes)")
        session.run(python, "-m", "pip", "install", "--disable-pip-version-check", "-e", f"{ROOT}[dev]", external=True)
        for old in SHARED_ENV.glob(".installed-*"):
            old.unlink()
        stamp.touch()
    return python


def run_in_course_env(session: nox.Session, *args: str, env: dict[str, str] | None = None) -> None:
    """Run ``python *args`` in the shared environment, from the repository root."""
    python = course_python(session)
    session.chdir(ROOT)
    session.run(python, *args, external=True, env={"PYTHONUNBUFFERED": "1", **(env or {})})


def _lab_session(lab_id: str, package: str) -> None:
    @nox.session(name=lab_id, venv_backend="none")
    def run_lab(session: nox.Session) -> None:
        run_in_course_env(session, "-m", "pytest", package, *session.posargs)

    run_lab.__doc__ = f"Run {package}'s graded tests on CPU (student code; add -- --impl=solution for the reference)."


for _lab_id, _package in LABS.items():
    _lab_session(_lab_id, _package)


@nox.session(venv_backend="none")
def solutions(session: nox.Session) -> None:
    """Run every lab's graded tests against the reference solutions."""
    run_in_course_env(session, "-m", "pytest", *LABS.values(), "--impl=solution", *session.posargs)


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """The project's own test suite (CI): harness and grader tests, plus every lab against its reference."""
    run_in_course_env(
        session, "-m", "pytest", *PROJECT_TESTS, *LABS.values(), "--impl=solution", *session.posargs
    )


@nox.session(venv_backend="none")
def grade(session: nox.Session) -> None:
    """The main job: grade the reference solutions and the untouched starters, print both summaries."""
    run_in_course_env(session, "-m", "grader", "selfcheck", *session.posargs)


def _bench_session(lab_id: str, package: str) -> None:
    @nox.session(name=f"bench-{lab_id}", venv_backend="none")
    def bench(session: nox.Session) -> None:
        run_in_course_env(
            session, "-m", f"{package}.benchmark", *session.posargs, env={"LABKIT_IMPL": os.environ.get("LABKIT_IMPL", "solution")}
        )

    bench.__doc__ = f"Benchmark {package} (reference solution unless LABKIT_IMPL=student)."


for _lab_id, _package in LABS.items():
    _bench_session(_lab_id, _package)


@nox.session(venv_backend="none")
def gpu(session: nox.Session) -> None:
    """GPU checks: every lab's @gpu tests against the reference, then lab 3's benchmark. Skips without CUDA."""
    python = course_python(session)
    has_cuda = session.run(
        python, "-c", "import torch; print(torch.cuda.is_available())", external=True, silent=True
    )
    if "True" not in str(has_cuda):
        session.skip("no CUDA device on this machine: the GPU checks are graded as pending")
    run_in_course_env(session, "-m", "pytest", *LABS.values(), "--impl=solution", "-m", "gpu", "-rs", *session.posargs)
    run_in_course_env(session, "-m", "lab03_triton_lowering.benchmark", env={"LABKIT_IMPL": "solution"})
