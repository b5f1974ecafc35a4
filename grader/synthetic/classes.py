"""Made-up classes: one roll of students, and what each kind of class writes for a student.

Every synthetic class starts from :func:`roll`: ``size`` students named ``student001``, ``student002``...,
each with a skill drawn from one random stream seeded once, so one seed always gives the same class.
A student's skill is the chance of each success (:meth:`Student.succeeds`): a function solved, a test
passed. Every ``set_aside``-th student draws nothing and stands in for something else (a fixture of the
corpus, a grader failure), chosen by the caller. What differs between the classes is what a student's
folder or file holds:

- :func:`write_outcomes`: the raw artifacts ``grader run`` leaves (events, pytest report, run record)
  for random outcomes on a rubric, such as :func:`synthetic_rubric`'s; ``grader score`` and
  ``grader report`` read them as they read a real class (the benchmark, the report's browser check);
- :func:`write_demo_submission`: a whole copy of the demo course of the grader's tests, each function
  of its editable files taken from the reference or left as the starter's stub, every set-aside student
  one of the corpus's submissions (syntax error, segfault, tampering...); graded for real by ``batch``
  or Slurm (``python -m grader.synthetic``);
- :func:`honest_module` and :func:`similarity_class`: the similarity lab's module as honest students
  write it (:mod:`grader.synthetic.algorithms`; a copier's is
  :func:`~grader.synthetic.algorithms.near_copy`).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from grader.course.rubric import LabRubric, Rubric, RubricTest, TalkingPointSpec
from grader.evidence.layout import EVENTS_FILE, RAW_DIR, REPORT_FILE, RUBRIC_FILE, RUN_FILE, SUBMISSION_FILE
from grader.synthetic.algorithms import CONTRACTS, VARIANTS, module, rename_locals, rewrite_lines, solved, stub
from grader.tests.corpus import DEMO_COURSE, DEMO_PACKAGES, corpus_names, materialize, starter_copy

#: The demo course's editable module of each lab.
DEMO_EDITABLE = {"labA": "arith.py", "labB": "text.py"}
#: Corpus submissions a demo class leaves out: they only wait for a time limit.
SLOW_FIXTURES = ("lab_timeout",)
#: Chance that a lab's pytest process of :func:`write_outcomes` dies mid-run (no report, a signal exit).
CRASH_CHANCE = 0.05
FUNCTION = re.compile(r"^def (\w+)\(", re.MULTILINE)


@dataclass(frozen=True)
class Student:
    """One made-up student of a :func:`roll`.

    Attributes:
        name: ``student001``... in roll order (the folder a class writes for them).
        skill: the chance of each success, in [0, 1] (0 for a set-aside student).
        rng: the class's one random stream, shared in roll order: a class is only reproducible when
            its students draw in that order.
        set_aside: ``None`` for an ordinary student; ``k`` for the (k+1)-th set-aside one.
    """

    name: str
    skill: float
    rng: random.Random
    set_aside: int | None = None

    def succeeds(self) -> bool:
        """One draw: ``True`` with probability :attr:`skill` (a function solved, a test passed)."""
        return self.rng.random() < self.skill


def roll(
    size: int, seed: int = 0, skills: tuple[float, float] = (0.0, 1.0), *, set_aside: int = 0
) -> Iterator[Student]:
    """The students of a class of ``size``, in order.

    Args:
        size: how many students.
        seed: seeds the class's one random stream.
        skills: each ordinary student's skill is drawn uniformly from this range.
        set_aside: every ``set_aside``-th student (0: none) draws no skill; the caller writes something
            else in their place.
    """
    rng = random.Random(seed)
    width = max(3, len(str(size)))  # names sort in roll order
    aside = 0
    for index in range(size):
        name = f"student{index + 1:0{width}d}"
        if set_aside and (index + 1) % set_aside == 0:
            yield Student(name, 0.0, rng, set_aside=aside)
            aside += 1
        else:
            yield Student(name, rng.uniform(*skills), rng)


def attempt(
    functions: Iterable[str], student: Student, solve: Callable[[str], str], leave: Callable[[str], str]
) -> dict[str, str]:
    """Each function's source as ``student`` hands it in: ``solve(name)`` when they succeed, else ``leave(name)``.

    One :meth:`Student.succeeds` draw per function, in order, each before that function's ``solve``.
    """
    return {name: solve(name) if student.succeeds() else leave(name) for name in functions}


def write_class(dest: Path, students: Iterable[Student], write: Callable[[Path, Student], None]) -> list[str]:
    """``write(dest / name, student)`` for each student, in roll order; return their names."""
    names = []
    for student in students:
        write(dest / student.name, student)
        names.append(student.name)
    return names


# ---------------------------------------------------------------- raw artifacts for the report


def synthetic_rubric(labs: int = 3, tests: int = 20) -> Rubric:
    """``labs`` labs of ``tests`` tests (the last two of each need a GPU), with three talking points each."""
    rubrics = []
    for index in range(labs):
        lab, package = f"lab{index + 1:02d}", f"lab{index + 1:02d}_synthetic"
        cases = tuple(
            RubricTest(f"{package}/test_lab.py::test_{k:02d}", f"test_{k:02d}", 1 + k % 3, k >= tests - 2)
            for k in range(tests)
        )
        points = tuple(
            TalkingPointSpec(f"tp{k}", "talking_point", f"Point {k}?", (f"test_{k:02d}", f"test_{k + 5:02d}"))
            for k in range(3)
        )
        rubrics.append(LabRubric(lab, package, f"Synthetic lab {index + 1}", cases, points))
    return Rubric(tuple(rubrics))


def lab_events(lab: LabRubric, student: Student) -> tuple[list[dict], list[dict], bool]:
    """One lab's event log and pytest report tests for ``student``, and whether its process crashed.

    GPU tests skip (no GPU); each other test passes when the student succeeds. With
    :data:`CRASH_CHANCE` the process dies as one test starts: the log stops there.
    """
    rng = student.rng
    crash_at = rng.randrange(len(lab.tests)) if rng.random() < CRASH_CHANCE else None
    events = [{"event": "configure"}, {"event": "collected", "nodeids": [t.nodeid for t in lab.tests]}]
    report_tests = []
    for position, test in enumerate(lab.tests):
        events.append({"event": "start", "nodeid": test.nodeid})
        if position == crash_at:
            return events, report_tests, True
        outcome = "skipped" if test.gpu else ("passed" if student.succeeds() else "failed")
        events.append(
            {
                "event": "report",
                "nodeid": test.nodeid,
                "when": "setup",
                "outcome": "skipped" if test.gpu else "passed",
                "message": "needs a CUDA GPU" if test.gpu else "",
            }
        )
        if not test.gpu:
            message = "" if outcome == "passed" else "AssertionError: outputs differ (max abs 0.03)"
            events.append(
                {"event": "report", "nodeid": test.nodeid, "when": "call", "outcome": outcome, "message": message}
            )
        events.append({"event": "report", "nodeid": test.nodeid, "when": "teardown", "outcome": "passed"})
        events.append({"event": "finish", "nodeid": test.nodeid})
        report_tests.append({"nodeid": test.nodeid, "outcome": outcome})
    events.append({"event": "session_finish", "exitstatus": 1})
    return events, report_tests, False


def write_outcomes(out: Path, rubric: Rubric, student: Student) -> None:
    """The raw artifacts ``grader run`` would leave in ``out`` for ``student`` on ``rubric`` (:func:`lab_events`)."""
    out.mkdir(parents=True)
    rubric.write(out / RUBRIC_FILE)
    (out / SUBMISSION_FILE).write_text(json.dumps({"submission": out.name, "gpu": "auto", "flags": [], "notes": []}))
    for lab in rubric.labs:
        raw = out / RAW_DIR / lab.lab
        raw.mkdir(parents=True)
        events, report_tests, crashed = lab_events(lab, student)
        if not crashed:
            (raw / REPORT_FILE).write_text(json.dumps({"tests": report_tests}))
        (raw / EVENTS_FILE).write_text("".join(json.dumps(event) + "\n" for event in events))
        (raw / RUN_FILE).write_text(
            json.dumps(
                {
                    "lab": lab.lab,
                    "exit_code": -11 if crashed else 1,
                    "timed_out": False,
                    "output_flooded": False,
                    "wall_s": 2.0,
                }
            )
        )


# ---------------------------------------------------------------- whole submissions of the demo course


def split_functions(source: str) -> tuple[str, dict[str, str]]:
    """(module header, function name -> its source) for a module of top-level functions."""
    starts = [match.start() for match in FUNCTION.finditer(source)]
    header = source[: starts[0]] if starts else source
    bodies = {}
    for index, start in enumerate(starts):
        end = starts[index + 1] if index + 1 < len(starts) else len(source)
        bodies[FUNCTION.match(source, start).group(1)] = source[start:end].rstrip() + "\n\n\n"
    return header, bodies


def mixed_module(lab: str, student: Student) -> str:
    """The demo lab's editable module with each function the reference's when ``student`` succeeds, else the stub."""
    package, name = DEMO_PACKAGES[lab], DEMO_EDITABLE[lab]
    header, starter = split_functions((DEMO_COURSE / package / name).read_text())
    _, solution = split_functions((DEMO_COURSE / "solutions" / package / name).read_text())
    handed_in = attempt(starter, student, solve=solution.__getitem__, leave=starter.__getitem__)
    return header + "".join(handed_in.values()).rstrip() + "\n"


def write_demo_submission(out: Path, student: Student) -> None:
    """``student``'s copy of the demo course in ``out``: mixed modules, or a corpus submission if set aside."""
    if student.set_aside is not None:
        fixtures = [name for name in corpus_names() if name not in SLOW_FIXTURES]
        materialize(fixtures[student.set_aside % len(fixtures)], out)
        return
    starter_copy(out)
    for lab, package in DEMO_PACKAGES.items():
        (out / package / DEMO_EDITABLE[lab]).write_text(mixed_module(lab, student))


def write_demo_class(dest: Path, size: int, seed: int = 0) -> list[str]:
    """``size`` submissions of the demo course in ``dest``, every fifth a corpus submission; return their names."""
    return write_class(dest, roll(size, seed, set_aside=5), write_demo_submission)


# ---------------------------------------------------------------- the similarity lab's honest students


def honest_module(student: Student) -> str:
    """``student``'s module of the similarity lab: each function solved when they succeed, in a variant of
    their own choosing written in their own hand; sometimes the functions in another order; and some of
    the local variables named their own way."""
    rng = student.rng
    imports: set[str] = set()

    def solve(function: str) -> str:
        variant = rng.randrange(len(VARIANTS[function]))
        imports.add(VARIANTS[function][variant][0])
        return rewrite_lines(solved(function, variant), rng)

    bodies = attempt(CONTRACTS, student, solve, stub)
    order = list(CONTRACTS)
    if rng.random() < 0.3:
        rng.shuffle(order)
    return rename_locals(module(order, bodies, imports), rng, share=0.5)


def similarity_class(size: int, seed: int = 0) -> dict[str, str]:
    """``size`` honest students' modules (name -> source), skills between 0.4 and 1."""
    return {student.name: honest_module(student) for student in roll(size, seed, (0.4, 1.0))}
