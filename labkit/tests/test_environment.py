"""Run from a Python that is not the course's environment, every entry point says which one to use."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

from labkit.environment import requirements_of, unmet_course_requirements, unmet_requirements
from labkit.labspec import COURSE_ROOT


def test_the_course_requirements_come_from_pyproject():
    assert any(req.startswith("torch==") for req in requirements_of(COURSE_ROOT / "pyproject.toml"))


def test_unmet_requirements_name_what_is_missing_or_off_the_pins():
    pytest_version = metadata.version("pytest")
    assert unmet_requirements(("pytest>=1", "rich")) == []
    assert unmet_requirements(("no-such-distribution-abc>=1.0",)) == ["no-such-distribution-abc (not installed)"]
    assert unmet_requirements(("pytest<1",)) == [f"pytest {pytest_version} (the course pins <1)"]
    assert unmet_requirements(("pytest<1",), check_versions=False) == []


def without_site_packages(*command: str) -> subprocess.CompletedProcess:
    """``python -S command`` from the course root: this Python without any installed package."""
    return subprocess.run(
        [sys.executable, "-S", *command], cwd=COURSE_ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("module", ["lab02_npu_backend.given.report", "lab01_fx_passes.given.benchmark"])
def test_a_lab_script_from_another_python_names_the_course_interpreter(module):
    done = without_site_packages("-m", module, "--help")
    assert done.returncode == 2, done.stderr
    assert "is not the course's environment" in done.stderr and "torch (not installed)" in done.stderr
    assert f"course-env/bin/python -m {module} --help" in done.stderr and "Traceback" not in done.stderr


def test_importing_a_lab_from_another_python_raises_the_same_advice():
    done = without_site_packages("-c", "import lab03_triton_lowering")
    assert done.returncode == 1
    assert "CourseEnvironmentError" in done.stderr and "torch (not installed)" in done.stderr


def test_supported_versions_widen_a_pin_without_replacing_it(tmp_path):
    # A GPU machine's own PyTorch (2.11) is accepted when pyproject lists it as supported; others are not.
    pytest_version = metadata.version("pytest")
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        f'[project]\ndependencies = ["pytest==0.0.1", "rich"]\n[tool.course.supported]\npytest = "=={pytest_version}"\n'
    )
    assert unmet_course_requirements(pyproject) == []
    pyproject.write_text('[project]\ndependencies = ["pytest==0.0.1"]\n[tool.course.supported]\npytest = "<1"\n')
    assert unmet_course_requirements(pyproject) == [
        f"pytest {pytest_version} (the course pins ==0.0.1, and also supports <1)"
    ]
