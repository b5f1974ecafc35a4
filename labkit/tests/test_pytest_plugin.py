"""The harness every lab shares: points markers, GPU skipping, the impl switch."""

import json
import os

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture
def course(pytester):
    pytester.makeconftest('pytest_plugins = ["labkit.pytest_plugin"]')
    return pytester


def test_graded_test_without_points_fails_collection(course):
    course.makepyfile(test_lab="def test_unscored():\n    pass\n")
    result = course.runpytest()
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*test_unscored*needs exactly one @pytest.mark.points(n)*"])


def test_points_must_be_a_positive_int(course):
    course.makepyfile(test_lab="import pytest\n@pytest.mark.points(0)\ndef test_zero():\n    pass\n")
    assert course.runpytest().ret != 0


def test_non_graded_files_need_no_points(course):
    course.makepyfile(test_helpers="def test_anything():\n    pass\n")
    course.runpytest().assert_outcomes(passed=1)


def test_gpu_tests_skip_with_reason_without_cuda(course):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    course.makepyfile(
        test_lab="import pytest\n@pytest.mark.points(2)\n@pytest.mark.gpu\ndef test_fast():\n    assert False\n"
    )
    result = course.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs a CUDA GPU*pending*"])


def test_json_report_metadata_carries_points_and_gpu(course):
    course.makepyfile(test_lab="import pytest\n@pytest.mark.points(3)\ndef test_a():\n    pass\n")
    course.runpytest("--json-report", "--json-report-file=report.json")
    report = json.loads((course.path / "report.json").read_text())
    assert report["tests"][0]["metadata"] == {"points": 3, "gpu": False}


def test_impl_option_sets_environment_for_the_run(course):
    course.makepyfile(
        test_lab=(
            "import os, pytest\n"
            "@pytest.mark.points(1)\n"
            "def test_impl():\n    assert os.environ['LABKIT_IMPL'] == 'solution'\n"
        )
    )
    course.runpytest("--impl=solution").assert_outcomes(passed=1)


@pytest.mark.parametrize("before", [None, "solution"])
def test_impl_option_leaves_the_callers_environment_as_it_was(course, monkeypatch, before):
    """An in-process run with --impl=student must not switch the labs of the run that started it."""
    if before is None:
        monkeypatch.delenv("LABKIT_IMPL", raising=False)
    else:
        monkeypatch.setenv("LABKIT_IMPL", before)
    course.makepyfile(test_lab="import pytest\n@pytest.mark.points(1)\ndef test_a():\n    pass\n")
    course.runpytest("--impl=student").assert_outcomes(passed=1)
    assert os.environ.get("LABKIT_IMPL") == before


# -- held-out tests: <lab>/heldout/test_*.py, graded, with an area and a visibility ----------------
HELDOUT_TEST = (
    "import pytest\n@pytest.mark.points(2)\n{markers}def test_other_cases(lab):\n    assert lab.__name__ == 'mylab'\n"
)


def make_lab_with_heldout(course, markers: str) -> None:
    lab = course.mkpydir("mylab")
    (lab / "test_lab.py").write_text("import pytest\n@pytest.mark.points(1)\ndef test_visible(lab):\n    pass\n")
    heldout = lab / "heldout"
    heldout.mkdir()
    (heldout / "__init__.py").write_text("")
    (heldout / "test_heldout.py").write_text(HELDOUT_TEST.format(markers=markers))


def test_heldout_tests_run_after_the_visible_ones_with_the_lab_fixture(course):
    make_lab_with_heldout(course, "@pytest.mark.area('other cases')\n")
    result = course.runpytest("-v", "-p", "no:randomly", "--impl=student")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*test_lab.py::test_visible PASSED*", "*heldout/test_heldout.py::test_other_cases PASSED*"]
    )


@pytest.mark.parametrize(
    "markers, problem",
    [
        ("", "needs @pytest.mark.area"),
        ("@pytest.mark.area('x')\n@pytest.mark.visibility('visible')\n", "cannot be visible"),
        ("@pytest.mark.area('x')\n@pytest.mark.visibility('secret')\n", "visibility must be one of"),
    ],
)
def test_heldout_tests_need_an_area_and_a_hidden_visibility(course, markers, problem):
    make_lab_with_heldout(course, markers)
    result = course.runpytest()
    assert result.ret != 0
    result.stderr.fnmatch_lines([f"*test_other_cases*{problem}*"])


def test_a_test_students_hold_cannot_be_hidden(course):
    course.makepyfile(
        test_lab="import pytest\n@pytest.mark.points(1)\n@pytest.mark.visibility('hidden')\ndef test_a():\n    pass\n"
    )
    result = course.runpytest()
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*test_a*ship to students and cannot be hidden*"])
