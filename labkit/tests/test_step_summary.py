"""What ``nox -s labNN`` ends with: points per handout step, where to start, one line per TODO."""

import sys
import textwrap

import pytest

from labkit.labspec import load_lab_spec
from labkit.step_summary import FAILED, NOT_IMPLEMENTED, PASSED, PENDING, TestOutcome, summary_lines

pytest_plugins = ["pytester"]

LAB_TOML = """
[lab]
id = "labX"
package = "labX_demo"
title = "Demo lab"
editable = ["demo.py"]

[[steps]]
step = 0
title = "Adding"
files = ["demo.py"]
tests = ["test_add"]

[[steps]]
step = 1
title = "Scaling"
files = ["demo.py"]
tests = ["test_scale", "test_scale_twice"]

[[steps]]
step = 2
title = "Wrapped"
files = ["demo.py"]
tests = ["test_wrapped", "test_torch_like"]
"""

DEMO = """
def add(a, b):
    return a + b


def scale(x, factor):
    # TODO(step 1): multiply
    raise NotImplementedError("scale: multiply x by factor")


def wrapped():
    try:
        scale(1, 2)
    except NotImplementedError as error:
        raise RuntimeError("the backend failed") from error
"""

TESTS = """
import pytest
from labX_demo import demo


@pytest.mark.points(2)
def test_add():
    assert demo.add(1, 2) == 3


@pytest.mark.points(3)
@pytest.mark.parametrize("factor", [2, 3])
def test_scale(factor):
    assert demo.scale(1, factor) == factor


@pytest.mark.points(1)
def test_scale_twice():
    assert demo.scale(demo.scale(1, 2), 2) == 4


@pytest.mark.points(1)
def test_wrapped():
    demo.wrapped()


@pytest.mark.points(1)
def test_torch_like():
    raise NotImplementedError("aten::frob is not implemented for the Meta backend")
"""


@pytest.fixture
def demo_lab(pytester):
    """A one-file lab next to the course plugin: 2 of 11 points pass; TODOs and real failures lose the rest."""
    pytester.makeconftest('pytest_plugins = ["labkit.pytest_plugin"]')
    package = pytester.mkpydir("labX_demo")
    (package / "lab.toml").write_text(textwrap.dedent(LAB_TOML))
    (package / "demo.py").write_text(DEMO)
    (package / "test_lab.py").write_text(TESTS)
    return pytester


def test_a_starter_todo_is_one_line_and_the_run_ends_with_points_per_step(demo_lab):
    result = demo_lab.runpytest("-p", "no:randomly")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, "a TODO is still a failure for the exit status"
    output = result.stdout.str()
    assert 'raise NotImplementedError("scale' not in output, "no traceback for a starter TODO"
    result.stdout.fnmatch_lines(
        [
            "*labX Demo lab: 2/11 points*",
            "Not implemented yet*--tb=long*",
            "  step 1  test_scale (2 cases): scale: multiply x by factor (demo.py:8)",
            "  step 1  test_scale_twice: scale: multiply x by factor (demo.py:8)",
            "  step 2  test_wrapped: scale: multiply x by factor (demo.py:8)",
            "step  file*passed*points*status",
            "0  demo.py*1/1*2/2*done",
            "1  demo.py*0/3*0/7*not implemented",
            "2  demo.py*0/2*0/2*2 failing (1 not implemented)",
            "total*1/6*2/11",
            "Start here: step 1, Scaling (demo.py); its tests: nox -s labX -- --step 1",
            "  its first failing test alone: nox -s labX -- -k test_scale",
            "*1 failed, 1 passed, 4 not implemented*",
        ]
    )
    # pytest's own NotImplementedError (not from an editable file) keeps its traceback.
    result.stdout.fnmatch_lines(["*_ test_torch_like _*", "*aten::frob*"])


def test_a_heldout_todo_line_keeps_the_test_name_apart(demo_lab):
    """Instructors run the held-out tests too; their TODO lines used to read 'held-outtest_...'."""
    heldout = demo_lab.path / "labX_demo" / "heldout"
    heldout.mkdir()
    (heldout / "__init__.py").write_text("")
    (heldout / "test_heldout.py").write_text(
        textwrap.dedent("""
        import pytest
        from labX_demo import demo


        @pytest.mark.points(1)
        @pytest.mark.area("scaling by other factors")
        def test_scale_by_seven():
            assert demo.scale(1, 7) == 7
    """)
    )
    result = demo_lab.runpytest("-p", "no:randomly")
    result.stdout.fnmatch_lines(["  held-out  test_scale_by_seven: scale: multiply x by factor (demo.py:8)"])


def test_tb_long_brings_the_todo_tracebacks_back(demo_lab):
    result = demo_lab.runpytest("-p", "no:randomly", "--tb=long")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert 'raise NotImplementedError("scale' in result.stdout.str()
    result.stdout.fnmatch_lines(
        ["Not implemented yet (a TODO still raises NotImplementedError):", "*5 failed, 1 passed*"]
    )


def test_a_deselected_run_says_its_totals_are_partial(demo_lab):
    result = demo_lab.runpytest("-p", "no:randomly", "-k", "add")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["*labX Demo lab: 2/2 points*", "(only the tests that ran*", "Every step that ran passes."]
    )


def test_the_todo_outcome_stays_failed_for_the_grader(demo_lab):
    """The event log the grader reads records the TODO as a failure (report.outcome is unchanged)."""
    demo_lab.makeconftest(
        'pytest_plugins = ["labkit.pytest_plugin"]\n'
        "OUTCOMES = []\n"
        "def pytest_runtest_logreport(report):\n"
        "    if report.when == 'call':\n"
        "        OUTCOMES.append((report.nodeid.split('::')[-1], report.outcome))\n"
        "def pytest_sessionfinish(session):\n"
        "    import json, pathlib\n"
        "    pathlib.Path('outcomes.json').write_text(json.dumps(OUTCOMES))\n"
    )
    demo_lab.runpytest("-p", "no:randomly", "-k", "scale_twice")
    assert (demo_lab.path / "outcomes.json").read_text() == '[["test_scale_twice", "failed"]]'


def _outcome(function: str, points: int, outcome: str, message: str = "") -> TestOutcome:
    return TestOutcome(f"test_lab.py::{function}", function, points, outcome, message)


def test_pending_gpu_points_are_neither_earned_nor_lost():
    spec = load_lab_spec("lab03_triton_lowering")
    gpu_test = next(test for step in spec.steps for test in step.tests if test.startswith("test_gpu_"))
    lines = summary_lines(spec, [_outcome(spec.steps[0].tests[0], 1, PASSED), _outcome(gpu_test, 10, PENDING)])
    assert any(line.startswith("total") and "1/11" in line and "10 pending" in line for line in lines)
    assert lines[-1] == "Every step that ran passes. The GPU tests are pending."


def test_where_to_start_is_the_first_step_in_handout_order():
    spec = load_lab_spec("lab01_fx_passes")
    late, early = spec.steps[7].tests[0], spec.steps[2].tests[0]
    lines = summary_lines(
        spec, [_outcome(late, 2, FAILED, "AssertionError"), _outcome(early, 3, NOT_IMPLEMENTED, "fold (x.py:1)")]
    )
    assert lines[-2].startswith(f"Start here: step 2, {spec.steps[2].title}")
    assert lines[-1].endswith(f"nox -s lab01 -- -k {early}")


def test_held_out_tests_are_their_own_group_after_the_steps():
    spec = load_lab_spec("lab01_fx_passes")
    lines = summary_lines(spec, [
        _outcome(spec.steps[0].tests[0], 1, PASSED),
        TestOutcome("heldout/test_x.py::test_x", "test_x", 4, FAILED, "AssertionError", heldout=True),
    ])  # fmt: skip
    rows = [line for line in lines if line.startswith(("0 ", "held-out"))]
    assert rows[0].startswith("0  op_names.py") and rows[1].startswith("held-out tests")
    assert "1/5" in next(line for line in lines if line.startswith("total"))
    assert lines[-2] == "Start here: test_x (a held-out test)"


def test_a_held_out_test_file_is_summarised_with_its_lab(demo_lab):
    heldout = demo_lab.path / "labX_demo" / "heldout"
    heldout.mkdir()
    (heldout / "test_more.py").write_text(
        "import pytest\n@pytest.mark.points(4)\n@pytest.mark.area('adding more')\ndef test_more():\n    pass\n"
    )
    result = demo_lab.runpytest("-p", "no:randomly")
    result.stdout.fnmatch_lines(["*labX Demo lab: 6/15 points*", "held-out tests*1/1*4/4*done", "total*2/7*6/15"])


def test_lab02s_unfinished_kernel_table_is_a_todo_line_not_a_traceback():
    """The starter's NpuSimulator stops at its incomplete KERNELS table: 30 tests printed a page each."""
    from lab02_npu_backend.simulator import NpuSimulator
    from labkit.step_summary import starter_todo

    with pytest.raises(ValueError, match="no kernel for ISA ops") as caught:
        NpuSimulator()
    spec = load_lab_spec("lab02_npu_backend")
    assert "no kernel for ISA ops" in (starter_todo(caught.value, spec) or "")


# -- --step N: exactly one handout step's tests -----------------------------------------------------
def _ran(result) -> list[str]:
    """The test ids a ``-v`` run reports, in order."""
    words = (" PASSED", " FAILED", " NOT IMPLEMENTED")
    return [
        line.split()[0].split("::")[-1]
        for line in result.stdout.lines
        if "::" in line and any(word in line for word in words)
    ]


def test_step_runs_every_case_of_that_steps_tests_and_nothing_else(demo_lab):
    result = demo_lab.runpytest("-p", "no:randomly", "-v", "--step", "1")
    assert sorted(_ran(result)) == ["test_scale[2]", "test_scale[3]", "test_scale_twice"]
    result.stdout.fnmatch_lines(["*labX Demo lab: 0/7 points*", "(only the tests that ran*--step*", "*3 deselected*"])


def test_step_combines_with_k_and_x(demo_lab):
    assert _ran(demo_lab.runpytest("-p", "no:randomly", "-v", "--step", "1", "-k", "twice")) == ["test_scale_twice"]
    assert len(_ran(demo_lab.runpytest("-p", "no:randomly", "-v", "--step", "2", "-x"))) == 1


def test_a_step_the_lab_does_not_have_is_an_error_naming_the_steps_it_has(demo_lab):
    result = demo_lab.runpytest("--step", "7")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--step 7: labX has no step 7; its steps are 0, 1, 2 (lab.toml)*"])


def test_step_outside_a_lab_is_an_error(pytester):
    pytester.makeconftest('pytest_plugins = ["labkit.pytest_plugin"]')
    pytester.makepyfile(test_helpers="def test_anything():\n    pass\n")
    result = pytester.runpytest("--step", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--step 1: no lab's graded tests were collected*"])


def test_the_start_here_line_gives_the_steps_command(demo_lab):
    demo_lab.runpytest("-p", "no:randomly").stdout.fnmatch_lines(
        ["Start here: step 1, Scaling (demo.py); its tests: nox -s labX -- --step 1"]
    )


# -- a test that crashes the interpreter: named, the rest run, the step table printed ---------------
CRASHING_TEST = """

@pytest.mark.points(4)
def test_add_crashes():
    import os
    os.abort()  # what an out-of-bounds store in an interpreted Triton kernel does to the process
"""


def run_lab(pytester, *args: str):
    """``python -m labkit.run_lab`` (what ``nox -s labNN`` runs) in the demo course, in a child process."""
    return pytester.run(sys.executable, "-m", "labkit.run_lab", "labX_demo", "-p", "no:randomly", *args, timeout=120)


def test_a_crashing_test_is_named_the_rest_run_and_the_step_table_is_printed(demo_lab):
    spec = demo_lab.path / "labX_demo" / "lab.toml"
    spec.write_text(spec.read_text().replace('tests = ["test_add"]', 'tests = ["test_add", "test_add_crashes"]'))
    tests = demo_lab.path / "labX_demo" / "test_lab.py"
    tests.write_text(
        tests.read_text().replace("\n\n@pytest.mark.points(3)", CRASHING_TEST + "\n\n@pytest.mark.points(3)", 1)
    )
    result = run_lab(demo_lab)
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "labkit: the test process killed by SIGABRT during labX_demo/test_lab.py::test_add_crashes; running the rest*",
        "*labX Demo lab: 2/15 points*",
        "0  demo.py*1/2*2/6*1 failing",  # the crash is a failure of its step
        "1  demo.py*0/3*0/7*not implemented",  # the tests after it ran
        "2  demo.py*0/2*0/2*2 failing (1 not implemented)",
        "total*1/7*2/15",
        "Start here: step 0, Adding (demo.py)*",
        "labkit: 1 test(s) crashed the test process*",
        "  labX_demo/test_lab.py::test_add_crashes (killed by SIGABRT)",
    ])  # fmt: skip
    result.stderr.fnmatch_lines(["Fatal Python error: Aborted"])


def test_after_a_crash_x_still_stops_the_run_and_prints_the_table(demo_lab):
    tests = demo_lab.path / "labX_demo" / "test_lab.py"
    tests.write_text(
        tests.read_text().replace("\n\n@pytest.mark.points(3)", CRASHING_TEST + "\n\n@pytest.mark.points(3)", 1)
    )
    result = run_lab(demo_lab, "-x")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*labX Demo lab: 2/6 points*", "(tests in no step)*0/1*0/4*1 failing", "total*1/2*2/6"]
    )


def test_a_crash_before_any_test_is_reported_not_resumed(demo_lab):
    demo_lab.makeconftest('pytest_plugins = ["labkit.pytest_plugin"]\nimport os\nos.abort()\n')
    result = run_lab(demo_lab)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["labkit: pytest killed by SIGABRT before any test ran*nothing to resume"])


def test_a_run_without_a_session_is_not_a_crash(demo_lab):
    """``nox -s lab01 -- --help`` ends before any session; its exit status is pytest's."""
    result = run_lab(demo_lab, "--help")
    assert result.ret == 0 and "labkit:" not in result.stdout.str()


def test_lab01s_benchmark_on_the_starter_names_the_step_to_finish_in_one_line(capsys):
    """``nox -s bench-lab01 -- --quick`` on an unfinished starter: one line, not an 18-line traceback."""
    from labkit.bench import finish_steps_first
    from labkit.impl import load_lab

    with pytest.raises(SystemExit) as caught, finish_steps_first("lab01_fx_passes", "the benchmark's default_pipeline"):
        load_lab("lab01_fx_passes", "student").default_pipeline(None)
    assert caught.value.code == 3  # labkit.unfinished.UNFINISHED_EXIT
    lines = capsys.readouterr().err.strip().splitlines()
    # The TODO met is step 9's, but the untouched starter's first open step is 0: that one is named.
    assert len(lines) == 1 and "finish step 0 first" in lines[0] and "nox -s lab01 -- --step 0" in lines[0], lines
    assert "step 9's: default_pipeline" in lines[0], lines


def test_the_step_named_is_the_first_whose_todo_still_stands(tmp_path):
    """A starter with steps 0-8 written names step 9 and every later step that has a file of its own (step 12
    grades steps 1-6's files on symbolic graphs: it has no TODO of its own, and is open while they are); an
    untouched one names step 0."""
    import shutil

    from labkit.labspec import load_lab_spec
    from labkit.unfinished import open_steps, standing_todos

    spec = load_lab_spec("lab01_fx_passes")
    assert [step.number for step in open_steps(spec)][:2] == [0, 1]
    folder = tmp_path / "lab01_fx_passes"
    shutil.copytree(spec.directory, folder)
    for step in spec.steps:
        if step.number < 9:
            for name in step.files:
                (folder / name).write_text("def done():\n    if False:\n        raise NotImplementedError('mine')\n")
    written = {name for step in spec.steps if step.number < 9 for name in step.files}
    later_steps = [step.number for step in spec.steps if step.number >= 9 and not set(step.files) <= written]
    assert later_steps[0] == 9 and 12 not in later_steps
    assert [step.number for step in open_steps(spec, folder)] == later_steps
    assert standing_todos("def f():\n    raise NotImplementedError('TODO(step 5): x')\n") == ["TODO(step 5): x"]


def test_a_not_implemented_error_from_elsewhere_keeps_its_traceback():
    from labkit.bench import finish_steps_first

    with pytest.raises(NotImplementedError, match="not a TODO"), finish_steps_first("lab01_fx_passes", "anything"):
        raise NotImplementedError("not a TODO of the lab")
