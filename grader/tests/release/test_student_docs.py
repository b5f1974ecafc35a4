"""The student release's documents: instructor sections stripped, no reference shown, every command run."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys

import pytest

from grader.__main__ import main
from grader.course.labs import load_course
from grader.release.build import build_release, check_student_documents, student_documents
from grader.release.student_docs import (
    DocsError,
    cheap_form,
    documented_commands,
    reference_mentions,
    strip_instructor_sections,
)
from grader.tests.corpus import DEMO_COURSE

PY = "/env/bin/python"


def test_instructor_sections_are_stripped_and_unbalanced_markers_refused():
    text = "a\n<!-- instructor-only -->\nsecret\n<!-- /instructor-only -->\nb\n"
    assert strip_instructor_sections(text) == "a\nb\n"
    with pytest.raises(DocsError, match="never closed"):
        strip_instructor_sections("a\n<!-- instructor-only -->\n", "README.md")
    with pytest.raises(DocsError, match="README.md:1: .* without an opening"):
        strip_instructor_sections("<!-- /instructor-only -->\n", "README.md")


@pytest.mark.parametrize(
    "line, shown",
    [
        ("nox -s lab01 -- --impl=solution", True),
        ("LABKIT_IMPL=solution python -m lab01_fx_passes.given.benchmark", True),
        ("python3 -m nox -s grade", True),
        ("nox -s lab01 tests", True),
        ("python -m grader batch CLASS --out graded", True),
        ("see solutions/lab01_fx_passes", True),
        ("nox -s grade-me", False),
        ("nox -s lab01 -- -k conv_bn", False),
        ("python -m grader run . --out graded/me", False),
    ],
)
def test_reference_mentions_find_instructor_commands_only(line, shown):
    assert bool(reference_mentions(line)) == shown


def test_documented_commands_come_from_shell_blocks_and_inline_code():
    text = """Run `nox -s lab01` or `python -m lab02_npu_backend.given.report --model all`; `torch.compile(m)` is code.

```bash
python3 -m pip install nox && python3 -m nox -s grade-me   # comment
LABKIT_IMPL=student python -m lab01_fx_passes.given.benchmark --quick
cd somewhere
```

```python
python = "not a command"
nox -s not-a-command-either
```
"""
    assert documented_commands(text) == [
        "nox -s lab01",
        "python -m lab02_npu_backend.given.report --model all",
        "python3 -m pip install nox",
        "python3 -m nox -s grade-me",
        "LABKIT_IMPL=student python -m lab01_fx_passes.given.benchmark --quick",
    ]


@pytest.mark.parametrize(
    "command, argv, kind, skipped",
    [
        ("nox -s lab01 -- -k conv_bn", (PY, "-m", "nox", "-s", "lab01", "--", "-k", "conv_bn", "-x"), "runs", ""),
        (
            "nox -s lab02 -- -k simulator -x",
            (PY, "-m", "nox", "-s", "lab02", "--", "-k", "simulator", "-x"),
            "runs",
            "",
        ),
        ("nox -s lab01 -- --tb=long", (PY, "-m", "nox", "-s", "lab01", "--", "--tb=long", "-x"), "runs", ""),
        ("python3 -m nox -s lab01 lab02", (PY, "-m", "nox", "-s", "lab01", "lab02", "--", "-x"), "runs", ""),
        ("nox -s draw-lab01", (PY, "-m", "nox", "-s", "draw-lab01"), "runs", ""),
        ("nox -s bench-lab01 -- --quick", (PY, "-m", "nox", "-s", "bench-lab01", "--", "--quick"), "runs", ""),
        (
            "python -m lab02_npu_backend.given.report --model all",
            (PY, "-m", "lab02_npu_backend.given.report", "--model", "all"),
            "runs",
            "",
        ),
        ("nox -s grade-me", (PY, "-m", "nox", "-s", "grade-me", "--", "--help"), "parses", ""),
        (
            "python -m grader run . --out graded/me",
            (PY, "-m", "grader", "run", ".", "--out", "graded/me", "--help"),
            "parses",
            "",
        ),
        ("python3 -m pip install nox", (), "parses", "installs packages"),
        ("nox -s labNN", (), "parses", "a template (labNN stands for a value)"),
        ("nox -s lab01 -- --step N", (), "parses", "a template (N stands for a value)"),
        (
            "python -m lab01_fx_passes.given.draw_graphs --model <name>",
            (),
            "parses",
            "a template (<name> stands for a value)",
        ),
    ],
)
def test_each_command_runs_for_real_or_only_parses(command, argv, kind, skipped):
    run = cheap_form(command, PY)
    assert (run.argv, run.kind, run.skipped) == (argv, kind, skipped)


def test_a_run_on_the_starter_passes_when_it_stops_at_an_unfinished_step(tmp_path):
    from grader.release.command_times import limit_for
    from grader.release.student_docs import CheapRun, _run_one

    limit = limit_for("any", {})

    def run(script: str):
        return _run_one(CheapRun("x", (sys.executable, "-c", script), kind="runs"), tmp_path, dict(os.environ), limit)[
            0
        ]

    assert run("print('lab01: finish step 2 first (Constant folding)'); raise SystemExit(3)") is None
    assert "exited 1, not 3" in run("print('lab01: finish step 2 first'); raise SystemExit(1)"), (
        "a module stopped at a step exits UNFINISHED_EXIT"
    )
    nox = _run_one(
        CheapRun("x", (sys.executable, "-m", "nox", "--version"), kind="runs"), tmp_path, dict(os.environ), limit
    )
    assert nox[0] is None
    assert "exited 1" in run("raise NotImplementedError('TODO')"), "a traceback is a failure"
    assert "exited 1" in run("print('finish step 2 first'); raise ValueError('and then a crash')")


def test_a_command_is_held_to_cpu_time_not_to_the_wall_clock(tmp_path):
    """The verdict is the same on a busy machine: a command that waits uses no CPU and passes within its
    backstop; one that spins (in a child process too) is stopped at its CPU limit, which a recording sets."""
    from grader.release.command_times import CommandLimit, limit_for, run_limited

    waits = run_limited(
        (sys.executable, "-c", "import time; time.sleep(2)"),
        cwd=tmp_path,
        env=dict(os.environ),
        limit=CommandLimit(cpu_s=1.0, wall_s=30.0, basis="test"),
    )
    assert waits.over == "" and waits.returncode == 0 and waits.cpu_s < 1.0
    spin = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'while True: pass'])"
    spins = run_limited(
        (sys.executable, "-c", spin),
        cwd=tmp_path,
        env=dict(os.environ),
        limit=CommandLimit(cpu_s=2.0, wall_s=60.0, basis="test"),
    )
    assert spins.returncode is None and spins.over.startswith("used over 2 s of CPU time"), spins
    sleeps = run_limited(
        (sys.executable, "-c", "import time; time.sleep(60)"),
        cwd=tmp_path,
        env=dict(os.environ),
        limit=CommandLimit(cpu_s=1.0, wall_s=2.0, basis="test"),
    )
    assert sleeps.returncode is None and sleeps.over.startswith("ran over 2 s of wall clock")
    assert limit_for("-m nox -s lab01 -- -x", {"-m nox -s lab01 -- -x": 12.0}).cpu_s == 120.0
    assert limit_for("-m nox -s lab01 -- -x", {"-m nox -s lab01 -- -x": 0.5}).cpu_s == 30.0, "the minimum"
    assert limit_for("-m lab01_fx_passes.report", {}).basis == "never recorded"


def test_recorded_command_times_are_read_back(tmp_path):
    from grader.release.command_times import read_command_times, write_command_times

    assert read_command_times(tmp_path) == {}
    write_command_times(tmp_path, {"-m nox -s lab02 -- -x": 7.123})
    assert read_command_times(tmp_path) == {"-m nox -s lab02 -- -x": 7.12}


def test_instructor_sessions_are_found_in_the_commands_a_document_shows():
    from grader.release.student_docs import instructor_sessions

    shown = [
        "nox -s zoo-lab01",
        "python3 -m nox -s lab01 -- --step 2",
        "nox -s grade-me",
        "nox -s labNN",
        "nox -s bench-lab01 report-check",
        "LABKIT_IMPL=student nox -s draw-lab01",
    ]
    assert instructor_sessions(shown) == ["nox -s zoo-lab01", "nox -s bench-lab01 report-check"]


def test_the_full_scaffolds_sections_leave_a_minimal_release():
    from grader.release.student_docs import scaffold_mentions, strip_scaffold_sections

    text = "a\n<!-- scaffold: full -->\nthe `# guidance: begin` comments spell it out\n<!-- /scaffold: full -->\nb\n"
    assert strip_scaffold_sections(text, "minimal") == "a\nb\n"
    assert strip_scaffold_sections(text, "full") == "a\nthe `# guidance: begin` comments spell it out\nb\n"
    assert scaffold_mentions("x\nsee the guidance blocks\n", "h.md") == ["h.md:2: see the guidance blocks"]


def test_the_env_assignment_of_a_command_is_kept():
    assert cheap_form("LABKIT_IMPL=student python -m x.y --quick", PY).env == (("LABKIT_IMPL", "student"),)


def demo_course_with_readme(tmp_path, readme: str):
    course = tmp_path / "course"
    shutil.copytree(DEMO_COURSE, course)
    (course / "README.md").write_text(readme)
    return course


def release_args(course, out, rubric_cache) -> list[str]:
    return [
        "release",
        "--out",
        str(out),
        "--course",
        str(course),
        "--cache-dir",
        str(rubric_cache),
        "--test-timeout",
        "4",
        "--lab-timeout",
        "15",
    ]


def test_the_release_strips_instructor_sections_and_runs_every_command_its_docs_show(tmp_path, capsys, rubric_cache):
    course = demo_course_with_readme(
        tmp_path,
        """# Demo course

```bash
python -m grader run . --out graded/me      # your grade
python -m labA_arith.no_such_module         # a handout command that no longer exists
```
<!-- instructor-only -->
```bash
nox -s solutions
```
<!-- /instructor-only -->
""",
    )
    out = tmp_path / "release"
    assert main(release_args(course, out, rubric_cache)) == 1
    err = capsys.readouterr().err
    assert "python -m labA_arith.no_such_module" in err and "No module named labA_arith.no_such_module" in err
    assert "python -m grader run . --out graded/me:" not in err  # that one ran
    readme = (out / "README.md").read_text()
    assert "nox -s solutions" not in readme and "instructor-only" not in readme and "graded/me" in readme


def test_the_release_refuses_a_document_that_still_shows_the_reference(tmp_path, capsys, rubric_cache):
    course = demo_course_with_readme(tmp_path, "# Demo\n\nCompare with `nox -s labA -- --impl=solution`.\n")
    assert main(release_args(course, tmp_path / "release", rubric_cache)) == 1
    assert "README.md:3: Compare with `nox -s labA -- --impl=solution`." in capsys.readouterr().err


def test_the_real_student_docs_show_no_instructor_command_and_only_existing_sessions(tmp_path):
    release = tmp_path / "release"
    build_release(load_course(), release)
    commands = check_student_documents(release)  # raises, naming each line, if a document shows the reference
    documents = {path.relative_to(release).as_posix(): path.read_text() for path in student_documents(release)}
    assert {"README.md", "lab01_fx_passes/README.md", "grader/README.md"} <= set(documents)
    assert "For instructors" not in documents["README.md"] and "nox -s grade-me" in documents["README.md"]
    listed = subprocess.run(
        [sys.executable, "-m", "nox", "-l"], cwd=release, capture_output=True, text=True, check=True
    ).stdout
    sessions = {line[2:].split(" -> ")[0] for line in listed.splitlines() if line[:2] in ("* ", "- ")}
    shown = {
        name
        for command in commands
        for run in [cheap_form(command)]
        if run.argv[1:3] == ("-m", "nox")
        for name in run.argv[run.argv.index("-s") + 1 : run.argv.index("--") if "--" in run.argv else None]
    }
    assert shown and shown <= sessions, shown - sessions
    assert "zoo-lab01" not in documents["README.md"], "an instructor session in a student document"


def test_the_real_courses_minimal_release_has_contracts_without_step_by_step_guidance(tmp_path):
    course = load_course()
    release = tmp_path / "minimal"
    build_release(course, release, scaffold="minimal")
    for path in course.editable_paths():
        text = (release / path).read_text()
        assert "# guidance:" not in text, f"{path}: a guidance block shipped in the minimal release"
        ast.parse(text, filename=str(path))
        assert text.count("raise NotImplementedError") == (course.root / path).read_text().count(
            "raise NotImplementedError"
        ), f"{path}: every TODO a student replaces is still there"
    commands = check_student_documents(release, "minimal")  # raises on a mention of the guidance left out
    assert commands and "spell out one way" not in (release / "lab01_fx_passes" / "README.md").read_text()
