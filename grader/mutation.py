"""How good are a lab's tests? Mutation testing of the reference solutions with cosmic-ray.

``python -m grader.mutation --course . --lab lab01 --step 2 --sample 15 --seed 0 --json out.json``

A *mutant* is the reference solution with one small change (``+`` becomes ``-``, ``<`` becomes ``<=``,
``True`` becomes ``False``, ...; cosmic-ray's operators). Tests that are worth their points fail on it:
the mutant is *killed*. A mutant the tests pass *survived*: either the tests miss a behaviour a wrong
student solution could also get wrong (write a test that kills it), or the change is *equivalent* (the
code still does the same thing; say why and move on). The score of a step is killed / (killed + survived).

For each handout step (``lab.toml``'s ``[[steps]]``) the mutants are those of the step's files in
``solutions/<package>/``, and the tests are the visible tests of every step that edits one of those files
(``--step N --step M ...``: a mutant of lab 3's ``kernel.py`` drawn for step 1 may lie in step 2's loop over
blocks, which step 1's tests never run; a student's mistake there loses step 2's points, so step 2's tests
judge it) and then, if they pass, the lab's held-out tests (all of them: ``lab.toml`` maps steps to visible
tests only, so the held-out folder cannot be cut by step). A mutant's tests that run past the timeout are counted
apart, as ``timeout``: a hang is caught by the grader's time limit, not by a test's assertion, so it is neither a
kill nor a survival. A mutant cosmic-ray could not run is ``incompetent``, also apart.

Everything happens in a temporary copy of the course: the course's own files are never mutated. A step
has about a hundred mutants and each one costs a pytest run of the step, so ``--sample K`` draws K of them
with a fixed ``--seed`` (the others are marked skipped in cosmic-ray's work database before it runs).
Mutants inside annotations of a module with ``from __future__ import annotations`` are never drawn: those
annotations are never evaluated, so such a mutant is equivalent by construction (:func:`annotation_spans`).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader.course.labs import SOLUTIONS_DIR
from labkit.labspec import HELDOUT_DIR, SPEC_FILE, TEST_FILE, LabSpec, LabSpecError, load_lab_spec

#: What a mutant's test run came to (cosmic-ray's outcomes, with its timeouts taken out of "killed").
KILLED, SURVIVED, TIMEOUT, INCOMPETENT = "killed", "survived", "timeout", "incompetent"
#: Not copied into the temporary course: environments, caches, outputs.
COPY_IGNORED = (".git", ".nox", "__pycache__", ".pytest_cache", ".hypothesis", "graded", "results", "*.egg-info")
#: pytest options of every test run: stop at the first failure, write nothing into the course.
PYTEST_OPTIONS = ("--impl=solution", "-x", "-q", "-p", "no:cacheprovider")


@dataclass
class Mutant:
    """One mutant that ran: where the change is, what it is, and what the tests made of it."""

    file: str
    line: int
    operator: str
    occurrence: int
    outcome: str
    diff: str


@dataclass
class StepResult:
    """The mutants of one handout step and their tally."""

    lab: str
    step: int
    title: str
    files: list[str]
    mutants_total: int
    baseline_seconds: float
    timeout_seconds: float
    #: Mutants never drawn because they lie inside annotations that are never evaluated (equivalent).
    in_annotations: int = 0
    #: The steps whose visible tests ran on each mutant (every step that edits one of ``files``).
    judged_by_steps: list[int] = field(default_factory=list)
    mutants: list[Mutant] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        return sum(mutant.outcome == outcome for mutant in self.mutants)

    @property
    def score(self) -> float | None:
        """killed / (killed + survived); None when no mutant got either verdict."""
        judged = self.count(KILLED) + self.count(SURVIVED)
        return self.count(KILLED) / judged if judged else None

    def summary(self) -> dict:
        return {
            "tried": len(self.mutants),
            **{outcome: self.count(outcome) for outcome in (KILLED, SURVIVED, TIMEOUT, INCOMPETENT)},
            "score": self.score,
        }


def find_lab(course: Path, lab: str) -> LabSpec:
    """The lab of ``course`` whose id (``lab01``) or package (``lab01_fx_passes``) is ``lab``."""
    specs = [load_lab_spec(path.parent.name, course) for path in sorted(course.glob(f"*/{SPEC_FILE}"))]
    for spec in specs:
        if lab in (spec.id, spec.package):
            return spec
    raise LabSpecError(f"{course}: no lab {lab!r}; its labs are {', '.join(spec.id for spec in specs) or 'none'}")


def copy_course(course: Path, into: Path) -> Path:
    """A copy of ``course`` under ``into`` (without environments and caches), to mutate freely."""
    copy = into / "course"
    shutil.copytree(course, copy, ignore=shutil.ignore_patterns(*COPY_IGNORED), symlinks=True)
    return copy


def judging_steps(spec: LabSpec, step: int) -> list[int]:
    """The steps whose tests judge a mutant of step ``step``'s files: every step that edits one of them."""
    chosen = next(entry for entry in spec.steps if entry.number == step)
    return [entry.number for entry in spec.steps if set(entry.files) & set(chosen.files)]


def test_command(spec: LabSpec, steps: list[int], heldout: bool) -> str:
    """The shell command (one string, as cosmic-ray takes it) that runs the tests of ``steps`` on the reference.

    cosmic-ray splits the command with shlex and runs it without a shell, so the ``&&`` that skips
    the held-out tests after a visible failure needs ``sh -c``.
    """
    python = shlex.quote(sys.executable)
    options = " ".join(PYTEST_OPTIONS)
    selection = " ".join(f"--step {number}" for number in steps)
    visible = f"{python} -m pytest {spec.package}/{TEST_FILE} {selection} {options}"
    if heldout and (spec.directory / HELDOUT_DIR).is_dir():
        visible += f" && {python} -m pytest {spec.package}/{HELDOUT_DIR} {options}"
    return f"sh -c {shlex.quote(visible)}"


def _cosmic_ray(copy: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "cosmic_ray.cli", *args], cwd=copy, check=True, capture_output=True)


def _key(item) -> str:
    """A work item's file, as the step's ``files`` name it (cosmic-ray may store it as given or resolved)."""
    return Path(item.mutations[0].module_path).as_posix()


def _outcome(result) -> str:
    """A cosmic-ray ``WorkResult`` as one of this module's outcomes."""
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    if result.worker_outcome != WorkerOutcome.NORMAL or result.test_outcome == TestOutcome.INCOMPETENT:
        return INCOMPETENT
    if result.test_outcome == TestOutcome.KILLED:
        return TIMEOUT if result.output == "timeout" else KILLED
    return SURVIVED


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where ``source``'s annotations are, as ((line, column), (end line, end column)) spans (pure).

    Empty unless the module starts with ``from __future__ import annotations``: then annotations are
    never evaluated (PEP 563), so a mutant inside one (``OpName | None`` as ``OpName - None``) is
    equivalent by construction and only dilutes the score. Without the import an annotation is
    evaluated when its function is defined, and such a mutant is a real one. Lines count from 1,
    columns from 0, as cosmic-ray's positions do.
    """
    tree = ast.parse(source)
    future = any(
        isinstance(node, ast.ImportFrom)
        and node.module == "__future__"
        and any(a.name == "annotations" for a in node.names)
        for node in tree.body
    )
    if not future:
        return []
    annotations = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            annotations.append(node.returns)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            annotations.append(node.annotation)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
    return [((n.lineno, n.col_offset), (n.end_lineno, n.end_col_offset)) for n in annotations]


def _inside(position: tuple[int, int], spans: list[tuple[tuple[int, int], tuple[int, int]]]) -> bool:
    return any(start <= tuple(position) < end for start, end in spans)


def mutate_step(
    copy: Path,
    spec: LabSpec,
    step: int,
    sample: int | None,
    seed: int,
    *,
    timeout: float | None = None,
    operators: str | None = None,
    heldout: bool = True,
    log=print,
) -> StepResult:
    """Run a sample of step ``step``'s mutants in the course copy ``copy``; return their outcomes.

    Args:
        copy: a copy of the course (its solutions are mutated, then put back, one mutant at a time).
        spec: the lab, as read from the copy.
        step: the handout step; its ``files`` are mutated in ``solutions/<package>/``.
        sample: how many mutants to run (None: all), drawn with ``random.Random(seed)``.
        timeout: seconds a mutant's tests may run (None: 3 times the unmutated run's, plus 10 s).
        operators: a regular expression; only cosmic-ray operators whose name it matches (search) are drawn.
        heldout: also run the lab's held-out tests (after the step's visible tests pass).

    Raises:
        RuntimeError: the step's tests fail on the unmutated reference (every mutant would look killed).
    """
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    chosen = next((entry for entry in spec.steps if entry.number == step), None)
    if chosen is None:
        have = ", ".join(str(entry.number) for entry in spec.steps)
        raise LabSpecError(f"{spec.id} has no step {step}; its steps are {have}")
    files = [f"{SOLUTIONS_DIR}/{spec.package}/{name}" for name in chosen.files]
    judges = judging_steps(spec, step)
    command = test_command(spec, judges, heldout)

    started = time.monotonic()
    baseline = subprocess.run(shlex.split(command), cwd=copy, capture_output=True, text=True, check=False)
    baseline_seconds = time.monotonic() - started
    if baseline.returncode != 0:
        raise RuntimeError(
            f"{spec.id} step {step}: the tests fail on the unmutated reference:\n{baseline.stdout[-3000:]}"
        )
    timeout = timeout or 3 * baseline_seconds + 10

    work = copy.parent / f"{spec.id}-step{step}"
    work.mkdir(exist_ok=True)
    config, session = work / "cosmic-ray.toml", work / "session.sqlite"
    config.write_text(
        "[cosmic-ray]\n"
        f"module-path = {json.dumps(files)}\n"
        f"timeout = {timeout:.1f}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(command)}\n\n"
        '[cosmic-ray.distributor]\nname = "local"\n',
        encoding="utf-8",
    )
    _cosmic_ray(copy, "init", str(config), str(session), "--force")

    with use_db(str(session), WorkDB.Mode.open) as db:
        items = sorted(
            db.work_items,
            key=lambda item: (str(item.mutations[0].module_path), item.mutations[0].operator_name,
                              item.mutations[0].occurrence),
        )  # fmt: skip
        spans = {path: annotation_spans((copy / path).read_text(encoding="utf-8")) for path in files}
        in_annotations = [item for item in items if _inside(item.mutations[0].start_pos, spans[_key(item)])]
        eligible = [
            item
            for item in items
            if item not in in_annotations and re.search(operators or "", item.mutations[0].operator_name)
        ]
        drawn = eligible if sample is None or sample >= len(eligible) else random.Random(seed).sample(eligible, sample)
        drawn_ids = {item.job_id for item in drawn}
        skipped = [item.job_id for item in items if item.job_id not in drawn_ids]
        db.set_multiple_results(skipped, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
    log(f"{spec.id} step {step}: {len(drawn)} of {len(items)} mutants of {', '.join(chosen.files)} "
        f"({len(in_annotations)} left out: inside annotations, never evaluated), judged by the tests of step"
        f"{'s' if len(judges) > 1 else ''} {', '.join(map(str, judges))} "
        f"(unmutated tests: {baseline_seconds:.0f} s; timeout {timeout:.0f} s)", flush=True)  # fmt: skip
    _cosmic_ray(copy, "exec", str(config), str(session))

    result = StepResult(spec.id, step, chosen.title, list(chosen.files), len(items), baseline_seconds, timeout)
    result.in_annotations = len(in_annotations)
    result.judged_by_steps = judges
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, outcome in db.completed_work_items:
            if item.job_id not in drawn_ids:
                continue
            mutation = item.mutations[0]
            result.mutants.append(
                Mutant(
                    file=str(mutation.module_path),
                    line=mutation.start_pos[0],
                    operator=mutation.operator_name,
                    occurrence=mutation.occurrence,
                    outcome=_outcome(outcome),
                    diff=outcome.diff or "",
                )
            )
    result.mutants.sort(key=lambda mutant: (mutant.file, mutant.line, mutant.operator, mutant.occurrence))
    return result


def format_table(results: list[StepResult]) -> str:
    """One row per step (tried, killed, survived, timed out, score), then each survivor with its diff."""
    header = f"{'lab':<6} {'step':>4} {'tried':>5} {'killed':>6} {'survived':>8} {'timeout':>7} {'incomp.':>7} score"
    lines = [header, "-" * len(header)]
    for result in results:
        counts = result.summary()
        score = "-" if result.score is None else f"{result.score:.0%}"
        lines.append(
            f"{result.lab:<6} {result.step:>4} {counts['tried']:>5} {counts[KILLED]:>6} {counts[SURVIVED]:>8} "
            f"{counts[TIMEOUT]:>7} {counts[INCOMPETENT]:>7} {score}"
        )
    for result in results:
        for mutant in result.mutants:
            if mutant.outcome == SURVIVED:
                lines += ["", f"survived: {mutant.file}:{mutant.line} {mutant.operator}", mutant.diff.rstrip()]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m grader.mutation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--course", type=Path, default=Path("."), help="the course's root (default: .)")
    parser.add_argument("--lab", required=True, help="the lab's id or package (lab01, lab01_fx_passes)")
    parser.add_argument("--step", type=int, action="append", help="a handout step (repeatable; default: every step)")
    parser.add_argument("--sample", type=int, default=None, help="mutants drawn per step (default: all of them)")
    parser.add_argument("--seed", type=int, default=0, help="the draw's seed (default: 0)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per mutant (default: 3x unmutated + 10)")
    parser.add_argument("--operators", default=None, help="only operators whose name matches this regular expression")
    parser.add_argument("--no-heldout", action="store_true", help="run the step's visible tests only")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON to this file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if importlib.util.find_spec("cosmic_ray") is None:
        print(
            "error: mutation testing needs cosmic-ray: nox -s mutation installs it (pip install -e '.[mutation]')",
            file=sys.stderr,
        )
        return 2
    course = args.course.resolve()
    try:
        spec = find_lab(course, args.lab)
    except LabSpecError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    steps = args.step or [entry.number for entry in spec.steps]
    results = []
    with tempfile.TemporaryDirectory(prefix="mutation-") as scratch:
        copy = copy_course(course, Path(scratch))
        copied = load_lab_spec(spec.package, copy)
        for step in steps:
            try:
                results.append(
                    mutate_step(copy, copied, step, args.sample, args.seed, timeout=args.timeout,
                                operators=args.operators, heldout=not args.no_heldout)
                )  # fmt: skip
            except (LabSpecError, RuntimeError) as error:
                print(f"error: {error}", file=sys.stderr)
                return 2
    for result in results:  # paths as the course names them, not the temporary copy's
        for mutant in result.mutants:
            mutant.diff = mutant.diff.replace(str(copy) + "/", "")
    print(format_table(results))
    if args.json:
        records = [{**asdict(result), "summary": result.summary()} for result in results]
        args.json.write_text(json.dumps({"seed": args.seed, "sample": args.sample, "steps": records}, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
