"""What a student reads at the end of ``nox -s labNN``: points per handout step, and where to start.

pytest's own summary counts tests; a student wants to know which *step* of the handout is done,
how many points that is, and what to do next. This module turns the outcomes of one lab's graded
tests into those lines. It is pure (outcomes in, text out): :mod:`labkit.pytest_plugin` collects
the outcomes and prints the lines.

An untouched starter raises ``NotImplementedError`` from every TODO block. A traceback of that is a
page of pytest internals saying "you have not written this yet", once per test, so such a failure
is one line here instead (:func:`starter_todo` recognises it); ``--tb=long`` brings the traceback back.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from labkit.labspec import LabSpec, Step

PASSED = "passed"
FAILED = "failed"
#: A test that failed only because a starter TODO still raises ``NotImplementedError``.
NOT_IMPLEMENTED = "not implemented"
#: A GPU test skipped on a machine without CUDA: graded later, neither earned nor lost.
PENDING = "pending"
SKIPPED = "skipped"
#: Longest message kept on a one-line entry.
MESSAGE_CHARS = 110


@dataclass(frozen=True)
class TestOutcome:
    """How one graded test case ended.

    Attributes:
        nodeid: pytest's id of the case (``test_lab.py::test_fuse[make_fx]``).
        function: the test function's name, without parameters (what ``lab.toml`` steps list).
        points: what the case is worth.
        outcome: :data:`PASSED`, :data:`FAILED`, :data:`NOT_IMPLEMENTED`, :data:`PENDING` or :data:`SKIPPED`.
        message: one line saying why it did not pass (empty when it passed).
    """

    __test__ = False  # a record, not a pytest test class

    nodeid: str
    function: str
    points: int
    outcome: str
    message: str = ""
    heldout: bool = False  # from the instructors' held-out tests (``<lab>/heldout/``), not the handout's steps


@dataclass(frozen=True)
class StepScore:
    """The tests of one handout step (``step`` is None for held-out tests, and for tests no step lists)."""

    step: Step | None
    outcomes: tuple[TestOutcome, ...]
    heldout: bool = False

    @property
    def earned(self) -> int:
        return sum(o.points for o in self.outcomes if o.outcome == PASSED)

    @property
    def possible(self) -> int:
        return sum(o.points for o in self.outcomes)

    @property
    def pending(self) -> int:
        return sum(o.points for o in self.outcomes if o.outcome == PENDING)

    def count(self, outcome: str) -> int:
        return sum(o.outcome == outcome for o in self.outcomes)

    @property
    def needs_work(self) -> bool:
        """True while a test of this step fails or is not implemented."""
        return any(o.outcome in (FAILED, NOT_IMPLEMENTED) for o in self.outcomes)

    @property
    def status(self) -> str:
        """One word or two for the table: done, not implemented, N failing, pending (GPU)."""
        failing, todo = self.count(FAILED), self.count(NOT_IMPLEMENTED)
        if todo and not failing and not self.count(PASSED):
            return "not implemented"
        if failing or todo:
            return f"{failing + todo} failing" + (f" ({todo} not implemented)" if todo and failing else "")
        if self.count(PENDING):
            return "pending (GPU)"
        return "done" if self.count(PASSED) else "skipped"

    @property
    def label(self) -> str:
        if self.step is None:
            return "held-out tests" if self.heldout else "(tests in no step)"
        return f"{self.step.number}  {', '.join(self.step.files)}"


def _todo_error(error: BaseException, spec: LabSpec) -> tuple[BaseException, traceback.FrameSummary] | None:
    """The ``NotImplementedError`` of a lab's TODO block in ``error``'s chain, and its innermost frame."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, NotImplementedError) and current.__traceback__ is not None:
            frame = traceback.extract_tb(current.__traceback__)[-1]
            path = Path(frame.filename)
            if path.name in spec.editable and path.parent.name == spec.package:
                return current, frame
        current = current.__cause__ or current.__context__
    return None


def starter_todo(error: BaseException, spec: LabSpec) -> str | None:
    """If ``error`` comes from a TODO block of the lab, one line saying so; else None.

    A TODO block is a ``raise NotImplementedError`` in one of the lab's editable files (the
    student's package or the reference under ``solutions/``): the innermost frame of the
    ``NotImplementedError`` is in a file named in ``editable``, in a folder named like the package.
    The error may be wrapped (``torch.compile`` re-raises a backend's error as its cause), so the
    whole ``__cause__``/``__context__`` chain is searched. A ``NotImplementedError`` raised by PyTorch
    itself is a real failure, not a TODO, and gets its traceback.
    """
    found = _todo_error(error, spec)
    if found is None:
        return None
    todo, frame = found
    text = str(todo).strip().splitlines()[0] if str(todo).strip() else "NotImplementedError"
    return f"{shorten(text)} ({Path(frame.filename).name}:{frame.lineno})"


#: ``TODO(step 5)`` in a TODO's message: the handout step that writes it.
_TODO_STEP = re.compile(r"\bTODO\(step (\d+)\)")


def todo_frame(error: BaseException, spec: LabSpec) -> traceback.FrameSummary | None:
    """The innermost frame of the lab's TODO ``NotImplementedError`` in ``error``'s chain, or None."""
    found = _todo_error(error, spec)
    return found[1] if found else None


def todo_step(spec: LabSpec, message: str, file: str) -> Step | None:
    """The step a TODO belongs to: the one its message names (``TODO(step 5): ...``), else the
    first step that edits its ``file``."""
    named = _TODO_STEP.search(message)
    if named:
        return next((s for s in spec.steps if s.number == int(named.group(1))), None)
    return next((s for s in spec.steps if file in s.files), None)


def step_to_finish_first(error: BaseException, spec: LabSpec, open_steps: Sequence[Step] = ()) -> str | None:
    """If ``error`` is a starter TODO, one line naming the handout step to finish first (else None).

    For a script that runs a lab (a benchmark, a report) on unfinished code: one line instead of a
    traceback. The step is the first of ``open_steps`` (the steps whose TODOs still stand, in handout
    order: :func:`labkit.unfinished.open_steps`) when it comes before the TODO's own step (:func:`todo_step`),
    else the TODO's own: the step ``nox -s labNN`` would say to start with.
    """
    found = _todo_error(error, spec)
    if found is None:
        return None
    todo, frame = found
    own = todo_step(spec, str(todo), Path(frame.filename).name)
    step = own
    if open_steps and (own is None or open_steps[0].number < own.number):
        step = open_steps[0]
    where = starter_todo(error, spec)
    if step is None:
        return f"{spec.id}: not implemented yet: {where}"
    met = "" if step is own or own is None else f", step {own.number}'s"
    return (
        f"{spec.id}: finish step {step.number} first ({step.title}; {', '.join(step.files)}): "
        f"stopped at a TODO{met}: {where}; its tests: nox -s {spec.id} -- --step {step.number}"
    )


#: Where a shortened message may end: after a sentence (``. ! ?``), then a clause (``; : ,`` or a dash).
_SENTENCE_END = re.compile(r"[.!?](?=\s)")
_CLAUSE_END = re.compile(r"[;:](?=\s)|\s[-\u2013\u2014](?=\s)")
_COMMA = re.compile(r",(?=\s)")


def shorten(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters, cut where a reader can stop.

    A text that fits is returned whole. Otherwise it ends at the last sentence end within the limit
    when that keeps at least half of it, else at the last clause boundary (``;``, ``:``, a dash),
    else at the last comma, each under the same rule, else at the last space; an ellipsis marks the cut. A word is never
    cut in two (a single word longer than ``limit`` is the only exception).
    """
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    room = line[: limit - 4]  # leaves space for " ..."
    for boundary in (_SENTENCE_END, _CLAUSE_END, _COMMA):
        ends = [match.start() + (1 if match.group().strip() in ".!?;:," else 0) for match in boundary.finditer(room)]
        if ends and ends[-1] >= len(room) // 2:
            return room[: ends[-1]].rstrip(" ,;:-\u2013\u2014") + " ..."
    space = room.rfind(" ")
    return (room[:space] if space > 0 else room).rstrip(" ,;:") + " ..."


def score_steps(spec: LabSpec, outcomes: Iterable[TestOutcome]) -> list[StepScore]:
    """Group ``outcomes`` by the handout step that lists their test function, in handout order.

    Steps none of whose tests ran are left out; tests no step lists (a spec out of date) come next,
    and the instructors' held-out tests last.
    """
    return score_handout_steps(spec.steps, outcomes)


def score_handout_steps(steps: Sequence[Step], outcomes: Iterable[TestOutcome]) -> list[StepScore]:
    """:func:`score_steps` from the steps alone (the grader keeps them in its rubric, not a ``lab.toml``)."""
    by_step: dict[int | str | None, list[TestOutcome]] = {}
    for outcome in outcomes:
        step = None if outcome.heldout else next((s for s in steps if outcome.function in s.tests), None)
        key = "heldout" if outcome.heldout else None if step is None else step.number
        by_step.setdefault(key, []).append(outcome)
    scores = [StepScore(step, tuple(by_step[step.number])) for step in steps if step.number in by_step]
    if None in by_step:
        scores.append(StepScore(None, tuple(by_step[None])))
    if "heldout" in by_step:
        scores.append(StepScore(None, tuple(by_step["heldout"]), heldout=True))
    return scores


def where_to_start(scores: Sequence[StepScore]) -> StepScore | None:
    """The first step, in handout order, with a failing or unimplemented test (None when all pass)."""
    return next((score for score in scores if score.needs_work), None)


def _grouped(outcomes: Iterable[TestOutcome]) -> list[tuple[TestOutcome, int]]:
    """One entry per (test function, message): the first case and how many cases share it."""
    groups: dict[tuple[str, str], list[TestOutcome]] = {}
    for outcome in outcomes:
        groups.setdefault((outcome.function, outcome.message), []).append(outcome)
    return [(cases[0], len(cases)) for cases in groups.values()]


def summary_lines(
    spec: LabSpec, outcomes: Sequence[TestOutcome], *, partial: bool = False, tracebacks_shown: bool = False
) -> list[str]:
    """The lines ``nox -s labNN`` ends with (without the title rule; see :func:`summary_title`).

    Args:
        spec: the lab's ``lab.toml``.
        outcomes: every graded test case of the lab that ran.
        partial: True when some of the lab's tests were deselected (``-k``): the totals are then
            those of the tests that ran, and the text says so.
        tracebacks_shown: True when the run printed the TODO tracebacks (``--tb=long``), so the
            text need not say how to get them.
    """
    scores = score_steps(spec, outcomes)
    lines: list[str] = []
    todo = [o for o in outcomes if o.outcome == NOT_IMPLEMENTED]
    if todo:
        how = "" if tracebacks_shown else "; full tracebacks: -- --tb=long"
        lines.append(f"Not implemented yet (a TODO still raises NotImplementedError{how}):")
        for score in scores:
            for first, cases in _grouped(o for o in score.outcomes if o.outcome == NOT_IMPLEMENTED):
                where = f"step {score.step.number}" if score.step else "held-out" if score.heldout else "no step"
                many = f" ({cases} cases)" if cases > 1 else ""
                lines.append(f"  {where:<6}  {first.function}{many}: {first.message}")
        lines.append("")

    width = max([len(s.label) for s in scores] + [len("step  file")])
    lines.append(f"{'step  file':<{width}}  {'passed':>7}  {'points':>7}  status")
    for score in scores:
        ran = f"{score.count(PASSED)}/{len(score.outcomes)}"
        lines.append(f"{score.label:<{width}}  {ran:>7}  {f'{score.earned}/{score.possible}':>7}  {score.status}")
    earned, possible = sum(s.earned for s in scores), sum(s.possible for s in scores)
    pending = sum(s.pending for s in scores)
    passed = sum(s.count(PASSED) for s in scores)
    total = f"{earned}/{possible}"
    lines.append(
        f"{'total':<{width}}  {f'{passed}/{len(outcomes)}':>7}  {total:>7}"
        + (f"  ({pending} pending: GPU tests, graded on a machine with CUDA)" if pending else "")
    )
    if partial:
        lines.append("(only the tests that ran: the lab has more; run it without -k or --step for the full score)")

    return lines + start_here(spec.id, scores)


def start_here(lab_id: str, scores: Sequence[StepScore]) -> list[str]:
    """Where to work next: the first unfinished step (:func:`where_to_start`), and the commands that run it.

    ``nox -s labNN`` ends with these lines, and the grader's feedback names the next step with them.
    """
    start = where_to_start(scores)
    if start is None:
        pending = any(score.pending for score in scores)
        return ["Every step that ran passes." + (" The GPU tests are pending." if pending else "")]
    first = next(o for o in start.outcomes if o.outcome in (FAILED, NOT_IMPLEMENTED))
    if start.step is None:
        where = "a held-out test" if start.heldout else "listed in no step of lab.toml"
        lines = [f"Start here: {first.function} ({where})"]
    else:
        lines = [
            f"Start here: step {start.step.number}, {start.step.title} ({', '.join(start.step.files)}); "
            f"its tests: nox -s {lab_id} -- --step {start.step.number}"
        ]
    return [*lines, f"  its first failing test alone: nox -s {lab_id} -- -k {first.function}"]


def summary_title(spec: LabSpec, outcomes: Sequence[TestOutcome]) -> str:
    """``lab01 FX graph transformation passes: 12/117 points``."""
    earned = sum(o.points for o in outcomes if o.outcome == PASSED)
    return f"{spec.id} {spec.title}: {earned}/{sum(o.points for o in outcomes)} points"
