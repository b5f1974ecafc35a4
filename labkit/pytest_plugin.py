"""The course's pytest plugin, loaded by the top-level ``conftest.py``.

It gives every lab the same harness:

- ``--impl student|solution``: which implementation the ``lab`` fixture returns (default: the student's).
- ``@pytest.mark.points(n)``: what a graded test is worth. Every test in a ``test_lab.py`` must carry
  exactly one; collection fails otherwise, so the rubric can never silently lose a test.
- ``@pytest.mark.gpu``: the test needs CUDA; without it the test is skipped with a clear reason and the
  grader counts its points as *pending*, not failed.
- ``lab``: a fixture returning the lab's public API (the package next to the test file, or its
  reference under ``solutions/``).
- With pytest-json-report active, each test's ``metadata`` carries ``points`` and ``gpu``.
"""

from __future__ import annotations

import os
from types import ModuleType

import pytest

from labkit import impl as impl_switch
from labkit.labspec import TEST_FILE
from labkit.triton_env import use_interpreter_without_cuda

GPU_SKIP_REASON = "needs a CUDA GPU (graded as pending on machines without one)"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("course", "graded lab course")
    group.addoption(
        "--impl",
        choices=impl_switch.IMPLS,
        default=None,
        help="test the student's package (default) or the reference solution under solutions/",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "points(n): points this graded test is worth (positive integer)")
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped (graded as pending) without one")
    chosen = config.getoption("--impl")
    if chosen is not None:
        # Through the environment so benchmarks and subprocesses started by tests agree.
        os.environ[impl_switch.IMPL_ENV_VAR] = chosen
    impl_switch.selected_impl()  # fail early on a bad LABKIT_IMPL
    use_interpreter_without_cuda()


def points_of(item: pytest.Item) -> int | None:
    """The points a test is worth, or None when it carries no ``points`` marker."""
    marker = item.get_closest_marker("points")
    return None if marker is None else marker.args[0] if marker.args else None


def _is_graded(item: pytest.Item) -> bool:
    return item.path.name == TEST_FILE


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    problems = []
    for item in items:
        if _is_graded(item):
            markers = list(item.iter_markers("points"))
            value = points_of(item)
            if len(markers) != 1 or not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                problems.append(f"{item.nodeid}: needs exactly one @pytest.mark.points(n) with n a positive int")
        if item.get_closest_marker("gpu") is not None:
            import torch

            if not torch.cuda.is_available():
                item.add_marker(pytest.mark.skip(reason=GPU_SKIP_REASON))
    if problems:
        raise pytest.UsageError("graded tests without valid points:\n  " + "\n  ".join(problems))


@pytest.hookimpl(optionalhook=True)
def pytest_json_runtest_metadata(item: pytest.Item, call: pytest.CallInfo) -> dict:
    """Record each test's points and GPU need in pytest-json-report's per-test ``metadata``."""
    if call.when != "setup":
        return {}
    return {"points": points_of(item), "gpu": item.get_closest_marker("gpu") is not None}


@pytest.fixture(scope="module")
def lab(request: pytest.FixtureRequest) -> ModuleType:
    """The public API of the lab whose folder holds this test file (student or reference, per ``--impl``)."""
    return impl_switch.load_lab(request.path.parent.name)
