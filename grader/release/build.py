"""Build the student distribution and prove it is safe to hand out (the ``release`` verb's work).

The distribution is the course minus instructor material: no ``solutions/`` (with each lab's course tests,
``solutions/<lab>/tests``), no held-out tests (each lab's ``heldout/`` folder), no project tests
(``labkit/tests``, ``grader/tests``, ``docker/tests``), no benchmarks of the grader, no CI or container files,
nothing under a folder named ``instructor``, and every Markdown file without its instructor-only sections
(:mod:`grader.release.student_docs`). The grader itself ships (without its tests) so students can check their
standing on the visible tests with ``nox -s grade-me``.

Verification (skipped with ``--no-verify``), each step failing loudly:

1. nothing in the release names the solutions package in an import; no document (nor a lab's Python
   file) shows the reference, an instructor command or an instructor session; a minimal release never
   speaks of the guidance blocks it leaves out;
2. no held-out test is in it: no ``heldout/`` folder, and every test its rubric collects is
   ``visible`` (the pristine course's held-out tests and points are counted, to show what was left out);
3. the untouched starters score 0 on every lab (a graded test that passes on the starter is a rubric bug);
4. it installs: ``pip install --no-deps --target`` builds it as a package (``lab.toml`` and data
   files must be declared as package data);
5. every lab's tests collect from the *installed* copy, as many as the release's rubric lists;
6. every command the student documents show works in the release, with the course environment's
   interpreter, each in its own scratch copy: lab, benchmark, report, picture and check commands run
   for real on the starter (each must pass, or stop at an unfinished step saying which, without a
   traceback, a module with exit status 3); slower ones (grading the whole course, the
   GPU check) are only parsed (``--help``); the two kinds are counted apart
   (:func:`grader.release.student_docs.cheap_form`). Each is held to a CPU-time limit derived from its
   recorded time (the course's ``release_times.json``, ``--record-times``), so a busy machine gives the
   same verdict as an idle one (:mod:`grader.release.command_times`).

The Gradescope bundle is built from the same function with ``include_heldout=True``: it is uploaded by
the instructor, and its grader must find the held-out tests in the course it grades against.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from grader.course.labs import SOLUTIONS_DIR, SUPPORT_PATHS, Course, CourseError, ignore_noise, load_course
from grader.course.rubric import Rubric
from grader.execute.collect import build_rubric
from grader.execute.command import pytest_env
from grader.release.command_times import read_command_times, write_command_times
from grader.release.student_docs import (
    DocsError,
    documented_commands,
    instructor_sessions,
    reference_mentions,
    run_documented_commands,
    scaffold_mentions,
    strip_instructor_sections,
    strip_scaffold_sections,
)
from grader.runners.local import GradeOptions, GradingSetup, grade_submission
from labkit.labspec import HELDOUT_DIR
from labkit.scaffold import SCAFFOLDS, guidance_blocks, without_guidance

#: Root files shipped to students when the course has them (the Dockerfile: its ``student`` target is
#: what the Dev Container builds from a student's copy).
STUDENT_ROOT_FILES = ("README.md", "noxfile.py", ".gitignore", "LICENSE", "Dockerfile", ".dockerignore")
#: Paths (relative to the course root) never shipped; any folder named ``instructor`` is dropped too.
INSTRUCTOR_ONLY = (
    SOLUTIONS_DIR,
    "labkit/tests",
    "grader/tests",
    "grader/benchmark.py",
    "grader/mutation.py",
    "grader/report/browser_check.py",
    "grader/synthetic",
    ".ci",
    "docker/build-base-image.sh",
    "docker/build-wheelhouse.sh",
    "docker/gradescope-local-run.sh",
    "docker/tests",
)
#: Student-facing folders shipped besides the labs and the harness: the grader (``nox -s grade-me``), the
#: Dev Container's definition and what the Dockerfile's student target installs with.
STUDENT_PACKAGES = ("grader", ".devcontainer", "docker")
SOLUTION_IMPORT = re.compile(rf"^\s*(from|import)\s+{SOLUTIONS_DIR}\b", re.MULTILINE)


class ReleaseError(RuntimeError):
    """The distribution failed a verification step (the message says which and why)."""


def _ignore_for(course_root: Path, include_heldout: bool = False):
    def ignore(folder: str, names: list[str]) -> list[str]:
        dropped = set(ignore_noise(folder, names))
        for name in names:
            rel = (Path(folder) / name).relative_to(course_root).as_posix()
            if rel in INSTRUCTOR_ONLY or name == "instructor" or (name == HELDOUT_DIR and not include_heldout):
                dropped.add(name)
        return sorted(dropped)

    return ignore


def build_release(course: Course, out: Path, *, include_heldout: bool = False, scaffold: str = "full") -> list[str]:
    """Copy the student distribution of ``course`` into ``out`` (emptied first); return its top-level entries.

    ``include_heldout`` keeps the labs' held-out tests: only for a grading copy the instructor uploads
    (the Gradescope bundle), never for students. ``scaffold="minimal"`` leaves the starters' guidance
    blocks out (contracts only, :mod:`labkit.scaffold`).

    Raises:
        CourseError: ``out`` inside the course, an unknown scaffold, a starter whose guidance blocks do not pair up.
    """
    if scaffold not in SCAFFOLDS:
        raise CourseError(f"--scaffold {scaffold!r}: expected one of {', '.join(SCAFFOLDS)}")
    if out.resolve() == course.root or course.root in out.resolve().parents:
        raise CourseError(f"--out {out} must be outside the course root {course.root}")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    ignore = _ignore_for(course.root, include_heldout)
    folders = [*SUPPORT_PATHS, *STUDENT_PACKAGES, *(spec.package for spec in course.labs), *course.not_ready]
    for name in dict.fromkeys(folders):
        source = course.root / name
        if source.is_dir():
            shutil.copytree(source, out / name, ignore=ignore)
        elif source.is_file():
            shutil.copy2(source, out / name)
    for name in STUDENT_ROOT_FILES:
        if (course.root / name).is_file():
            shutil.copy2(course.root / name, out / name)
    for document in student_documents(out):
        try:
            source = str(document.relative_to(out))
            stripped = strip_scaffold_sections(
                strip_instructor_sections(document.read_text(encoding="utf-8"), source), scaffold, source
            )
        except DocsError as error:
            raise CourseError(str(error)) from error
        document.write_text(stripped, encoding="utf-8")
    if scaffold == "minimal":
        strip_guidance(course, out)
    return sorted(path.name for path in out.iterdir())


def strip_guidance(course: Course, release: Path) -> int:
    """Remove the guidance blocks from every starter file of ``release``; return how many were removed.

    Raises:
        CourseError: naming the file and line of a block that does not pair up.
    """
    removed = 0
    for path in course.editable_paths():
        starter = release / path
        if not starter.is_file():
            continue
        text = starter.read_text(encoding="utf-8")
        try:
            removed += len(guidance_blocks(text))
            starter.write_text(without_guidance(text), encoding="utf-8")
        except ValueError as error:
            raise CourseError(f"{path}: {error}") from error
    return removed


def student_documents(release: Path) -> list[Path]:
    """The Markdown files of a release (its README, the handouts, the grader's README)."""
    return sorted(release.rglob("*.md"))


def student_sources(release: Path) -> list[Path]:
    """The Python files of the release's labs: their docstrings and comments are read by students too."""
    return sorted(path for path in release.glob("lab[0-9]*/**/*.py") if path.is_file())


def check_student_documents(release: Path, scaffold: str = "full") -> list[str]:
    """Step 1b: no document (nor a lab's Python file) shows the reference or an instructor session, and
    a minimal release never speaks of the guidance blocks it left out; return the commands the documents show.

    Raises:
        ReleaseError: naming each line that still shows instructor material, or contradicts the scaffold.
    """
    mentions, commands, contradictions = [], [], []
    for document in [*student_documents(release), *student_sources(release)]:
        text = document.read_text(encoding="utf-8")
        source = str(document.relative_to(release))
        mentions += reference_mentions(text, source)
        if scaffold == "minimal":
            contradictions += scaffold_mentions(text, source)
        if document.suffix == ".md":
            shown = documented_commands(text)
            mentions += [f"{source}: `{command}` runs an instructor session" for command in instructor_sessions(shown)]
            commands += shown
    if mentions:
        raise ReleaseError(
            "student documents show instructor material (put it between <!-- instructor-only --> "
            "and <!-- /instructor-only -->):\n  " + "\n  ".join(mentions)
        )
    if contradictions:
        raise ReleaseError(
            "the minimal release's files speak of the guidance blocks it leaves out (put such text "
            "between <!-- scaffold: full --> and <!-- /scaffold: full -->):\n  " + "\n  ".join(contradictions)
        )
    return list(dict.fromkeys(commands))


def check_no_solution_imports(release: Path) -> None:
    """Step 1: no shipped module imports the reference solutions."""
    offenders = [
        str(path.relative_to(release))
        for path in release.rglob("*.py")
        if SOLUTION_IMPORT.search(path.read_text(encoding="utf-8", errors="replace"))
    ]
    if (release / SOLUTIONS_DIR).exists():
        offenders.append(f"{SOLUTIONS_DIR}/ itself")
    if offenders:
        raise ReleaseError("the release refers to the reference solutions: " + ", ".join(offenders))


def check_no_heldout_tests(release: Path, rubric: Rubric, pristine: Rubric | None = None) -> str:
    """Step 2: no held-out test file ships, and every collected test is visible; return what was left out.

    Args:
        rubric: the release's own rubric (collected from the release).
        pristine: the instructor course's rubric, to count the held-out tests left out (optional).
    """
    folders = sorted(path.relative_to(release).as_posix() for path in release.rglob(HELDOUT_DIR) if path.is_dir())
    shipped = [test.nodeid for lab in rubric.labs for test in lab.tests if test.heldout]
    if folders or shipped:
        raise ReleaseError("the release contains held-out tests: " + ", ".join(folders + shipped))
    if pristine is None:
        return "no held-out test is in the release"
    tests = sum(test.heldout for lab in pristine.labs for test in lab.tests)
    points = sum(lab.heldout_points for lab in pristine.labs)
    return f"none of the course's {tests} held-out tests ({points} points) is in the release"


def install_release(release: Path, target: Path, python: str = sys.executable) -> None:
    """Step 4: build and install the release into ``target`` (no dependencies, no network)."""
    done = subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(release),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise ReleaseError(f"the release does not install:\n{(done.stdout + done.stderr)[-3000:]}")
    shutil.rmtree(release / "build", ignore_errors=True)  # setuptools' scratch folder
    for info in release.glob("*.egg-info"):
        shutil.rmtree(info, ignore_errors=True)


def count_installed_tests(site: Path, packages: list[str], python: str = sys.executable) -> int:
    """Step 5: collect the labs' tests from the installed copy; return how many were collected."""
    with tempfile.TemporaryDirectory(prefix="grader-collect-") as empty:
        done = subprocess.run(
            [
                python,
                "-m",
                "pytest",
                "--collect-only",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "labkit.pytest_plugin",
                "-c",
                os.devnull,
                "--rootdir",
                empty,
                "--pyargs",
                *packages,
            ],
            cwd=empty,
            env=pytest_env(site, "off"),
            capture_output=True,
            text=True,
            timeout=600,
        )
    if done.returncode != 0:
        raise ReleaseError(
            f"the installed tests do not collect (pytest exit {done.returncode}):\n"
            f"{done.stdout[-3000:]}{done.stderr[-2000:]}"
        )
    return sum(1 for line in done.stdout.splitlines() if "::" in line)


def verify_release(
    release: Path,
    *,
    options: GradeOptions,
    cache_dir: Path | None,
    log=print,
    pristine: Course | None = None,
    scaffold: str = "full",
    record_times: bool = False,
) -> None:
    """Run the six checks of the module docstring on the built release.

    Args:
        pristine: the instructor course the release was built from (its held-out tests are counted), whose
            ``release_times.json`` sets the documented commands' CPU limits (:mod:`grader.release.command_times`).
        record_times: write each documented command's CPU time into the pristine course's ``release_times.json``.

    Raises:
        ReleaseError: at the first failed check.
    """
    check_no_solution_imports(release)
    log("  ok: no module imports the reference solutions")
    commands = check_student_documents(release, scaffold)
    log(f"  ok: no document shows the reference or an instructor command ({len(commands)} commands shown)")
    course = load_course(release)
    if not course.select(None):
        raise ReleaseError("the release has no lab ready to grade")
    setup = GradingSetup.for_course(course, options, None, cache_dir)
    labs, rubric = setup.labs, setup.rubric
    broken = [f"{lab.lab}: {lab.error}" for lab in rubric.labs if lab.error]
    if broken:
        raise ReleaseError("labs whose tests do not collect in the release: " + "; ".join(broken))
    pristine_rubric = None
    if pristine is not None:
        pristine_rubric = build_rubric(pristine, pristine.select([spec.id for spec in labs]), cache_dir, options.python)
    log(f"  ok: {check_no_heldout_tests(release, rubric, pristine_rubric)}")
    with tempfile.TemporaryDirectory(prefix="grader-release-") as scratch:
        result = grade_submission(release, Path(scratch) / "starter-grade", setup, name="untouched starter")
        scored = [
            f"{lab.lab} {lab.score}/{lab.max_score} ({lab.status})"
            for lab in result.labs
            if lab.score or lab.status != "graded"
        ]
        if scored:
            passing = [t.nodeid for lab in result.labs for t in lab.tests if t.points]
            raise ReleaseError(
                "the untouched starters must score 0 and be graded normally: "
                + ", ".join(scored)
                + (f"; tests passing on the starter: {', '.join(passing)}" if passing else "")
            )
        log(f"  ok: the untouched starters score 0 on {', '.join(lab.lab for lab in result.labs)}")
        site = Path(scratch) / "site"
        install_release(release, site, options.python)
        log(
            "  ok: the release installs ("
            f"{', '.join(sorted(p.name for p in site.iterdir() if p.is_dir() and '.' not in p.name))}"
            ")"
        )
        collected = count_installed_tests(site, [spec.package for spec in labs], options.python)
        expected = sum(len(lab.tests) for lab in rubric.labs)
        if collected != expected:
            raise ReleaseError(f"the installed copy collects {collected} tests, the course has {expected}")
        log(f"  ok: the installed copy collects all {collected} graded tests")
    times_home = pristine.root if pristine is not None else release
    failures, counts, measured = run_documented_commands(
        release, commands, options.python, times=read_command_times(times_home), log=log
    )
    if record_times:
        log(f"  recorded {len(measured)} commands' CPU times in {write_command_times(times_home, measured)}")
    if failures:
        raise ReleaseError("commands the student documents show fail in the release:\n  " + "\n  ".join(failures))
    log(
        f"  ok: of the {len(commands)} commands the student documents show, {counts['runs']} ran for real on the "
        f"starter (each passed, or stopped at an unfinished step saying which), {counts['parses']} were only "
        f"parsed (--help: they take minutes or need finished labs), {counts['not run']} were not run "
        "(templates, installs, nox's default sessions)"
    )
