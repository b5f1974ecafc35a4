"""How fast is the grader? ``python -m grader.benchmark [--students 1000] [--out results/grader]``.

Three measurements, printed as a table and written as JSON (:mod:`labkit.bench`):

1. **Scoring and reporting a class** (target: 1,000 students in under 5 s). Synthetic raw artifacts
   (``run.json``, ``events.jsonl``, ``report.json`` for 3 labs of 20 tests each, with passes, failures,
   crashes and pending GPU tests) are written for every student first; then timed: re-scoring every
   student from disk (:func:`grader.scoring.score.rescore`) and building the class report (CSV, JSON, HTML with
   charts) from their summaries. Writing each student's three output files is timed on its own line:
   it measures the disk (creating a small file costs about a millisecond on some machines) more than
   the grader. CPU seconds are shown beside wall seconds: on a shared machine they are the grader's own
   cost.
2. **Grader overhead per lab** (target: under 5 s on top of pytest). The same lab's tests run by plain
   pytest, and graded by :func:`grader.runners.local.grade_submission` (sandbox copy, canary, probe, JSON report,
   scoring, outputs), interleaved; the difference of the medians is the overhead.
3. **Batch scaling**: the same N submissions graded with ``-j 1`` and ``-j <cores>``.
4. **Isolation** (target: at most 10% of a lab's grading time). The reference solution of one lab graded
   with every process under bubblewrap and graded unisolated, interleaved round by round; the ratio of
   the two, paired by round, with its interquartile range and a verdict the noise cannot flip.

Measurements 2 to 4 use the demo course of the grader's tests (fast, torch-free) unless ``--course``
names another course root (``--course . --lab lab01 --only isolation`` measures a real lab).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from grader.course.labs import load_course, make_reference_submission
from grader.execute.command import config_args, pytest_env
from grader.execute.isolation import Bubblewrap, Isolation, Unisolated
from grader.execute.limits import RunLimits
from grader.report.summary import write_report
from grader.runners.batch import grade_all
from grader.runners.local import GradeOptions, GradingSetup, grade_submission
from grader.scoring.feedback import write_outputs
from grader.scoring.score import rescore
from grader.synthetic.classes import roll, synthetic_rubric, write_class, write_outcomes
from labkit.bench import benchmark_parser, paired_ratio, print_table, time_interleaved, verdict, write_json

DEMO_COURSE = Path(__file__).resolve().parent / "tests" / "fixtures" / "course"


def bench_class(students: int, scratch: Path) -> dict[str, float]:
    """Measurement 1: re-score ``students`` from disk, then build the class report."""
    rubric = synthetic_rubric()
    graded = scratch / "class"
    write_class(graded, roll(students, skills=(0.2, 1.0)), lambda out, student: write_outcomes(out, rubric, student))
    folders = sorted(graded.iterdir())
    start, cpu = time.perf_counter(), time.process_time()
    results = [rescore(folder) for folder in folders]
    scored, scored_cpu = time.perf_counter() - start, time.process_time() - cpu
    start = time.perf_counter()
    for folder, result in zip(folders, results):
        write_outputs(result, folder)
    written = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    write_report(graded, scratch / "report")
    reported, reported_cpu = time.perf_counter() - start, time.process_time() - cpu
    return {
        "students": students,
        "score_s": scored,
        "score_cpu_s": scored_cpu,
        "write_s": written,
        "report_s": reported,
        "report_cpu_s": reported_cpu,
        "total_s": scored + reported,
        "total_cpu_s": scored_cpu + reported_cpu,
    }


def bench_overhead(course_root: Path, lab_id: str, scratch: Path, repeats: int) -> dict[str, float]:
    """Measurement 2: plain pytest on the starter of one lab versus grading that lab."""
    setup = GradingSetup.for_course(
        load_course(course_root), GradeOptions(gpu="auto", limits=RunLimits()), [lab_id], scratch / "cache"
    )
    course = setup.course
    plain = [
        sys.executable,
        "-m",
        "pytest",
        setup.labs[0].package,
        "-q",
        "-p",
        "no:cacheprovider",
        *config_args(course.root),
    ]
    env = pytest_env(course.root, "auto")
    counter = iter(range(10_000))

    def run_plain() -> None:
        subprocess.run(plain, cwd=course.root, env=env, capture_output=True, check=False)

    def run_graded() -> None:
        grade_submission(course.root, scratch / f"graded-{next(counter)}", setup, name="starter")

    timings = time_interleaved({"pytest": run_plain, "grader": run_graded}, warmup=1, repeats=repeats)
    return {
        "lab": lab_id,
        "pytest_s": timings["pytest"].median_s,
        "grader_s": timings["grader"].median_s,
        "overhead_s": timings["grader"].median_s - timings["pytest"].median_s,
    }


def bench_batch(course_root: Path, submissions: int, scratch: Path, jobs: list[int]) -> list[dict[str, float]]:
    """Measurement 3: the same ``submissions`` starters graded with each ``-j``."""
    setup = GradingSetup.for_course(load_course(course_root), GradeOptions(gpu="auto"), None, scratch / "cache")
    folders = scratch / "submissions"
    for index in range(submissions):
        shutil.copytree(
            setup.course.root, folders / f"s{index:02d}", ignore=shutil.ignore_patterns("solutions", "__pycache__")
        )
    entries = [(path.name, path) for path in sorted(folders.iterdir())]
    rows = []
    for j in jobs:
        start = time.perf_counter()
        grade_all(entries, scratch / f"batch-j{j}", setup, jobs=j, show_progress=False)
        rows.append({"jobs": j, "wall_s": time.perf_counter() - start})
    for row in rows:
        row["speedup"] = rows[0]["wall_s"] / row["wall_s"]
    return rows


def bench_isolation(course_root: Path, lab_id: str, scratch: Path, repeats: int) -> dict[str, Any]:
    """Measurement 4: the reference of one lab graded under bubblewrap and unisolated (see the docstring)."""
    course = load_course(course_root)
    base = GradingSetup.for_course(course, GradeOptions(gpu="auto"), [lab_id], scratch / "cache")
    reference = make_reference_submission(course, scratch / "reference")
    counter = iter(range(10_000))
    scores: dict[str, list[int]] = {"bubblewrap": [], "none": []}

    def graded(isolation: Isolation):
        setup = replace(base, options=replace(base.options, isolation=isolation))

        def run() -> None:
            result = grade_submission(reference, scratch / f"graded-{next(counter)}", setup, name="reference")
            scores["none" if isolation.name == "none" else "bubblewrap"].append(result.total["score"])

        return run

    timings = time_interleaved(
        {"bubblewrap": graded(Bubblewrap(sys.executable, course.root)), "none": graded(Unisolated())},
        warmup=0,
        repeats=repeats,
    )
    ratio = paired_ratio(timings["bubblewrap"], timings["none"])
    return {
        "lab": lab_id,
        "isolated": timings["bubblewrap"].to_dict(),
        "unisolated": timings["none"].to_dict(),
        "isolated_text": timings["bubblewrap"].describe("s"),
        "unisolated_text": timings["none"].describe("s"),
        "ratio": ratio.to_dict(),
        "ratio_text": ratio.describe(),
        "verdict": verdict(ratio, 1.10, at_least=False),
        "scores": scores,
    }


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__.splitlines()[0], "results/grader", __spec__.name)
    parser.add_argument("--students", type=int, default=1000, help="synthetic class size for scoring and reporting")
    parser.add_argument("--course", type=Path, default=DEMO_COURSE, help="course root for overhead and batch runs")
    parser.add_argument("--lab", default=None, help="lab id for the overhead run (default: the course's first lab)")
    parser.add_argument("--batch", type=int, default=8, help="submissions in the batch-scaling run")
    parser.add_argument("--only", default="class,overhead,batch,isolation", help="comma-separated measurements to run")
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    repeats = max(1, min(args.repeats, 5))  # each round grades a whole lab: a few are enough
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="grader-bench-") as scratch_name:
        scratch = Path(scratch_name)
        lab_id = args.lab or load_course(args.course).labs[0].id
        klass = bench_class(args.students, scratch / "class") if "class" in only else None
        overhead = bench_overhead(args.course, lab_id, scratch / "overhead", repeats) if "overhead" in only else None
        batch = bench_batch(args.course, args.batch, scratch / "batch", sorted({1, cores})) if "batch" in only else None
        isolation = (
            bench_isolation(args.course, lab_id, scratch / "isolation", repeats) if "isolation" in only else None
        )
    if klass:
        print_class(klass)
    if overhead:
        print_table(
            f"Grader overhead on {overhead['lab']} (target < 5 s)",
            ["run", "median s"],
            [
                ["plain pytest", overhead["pytest_s"]],
                ["grader run (one lab)", overhead["grader_s"]],
                ["overhead", overhead["overhead_s"]],
            ],
        )
    if batch:
        print_table(
            f"Batch of {args.batch} submissions",
            ["-j", "wall s", "speedup"],
            [[row["jobs"], row["wall_s"], row["speedup"]] for row in batch],
        )
    if isolation:
        print_table(
            f"Isolation on {isolation['lab']}'s reference (target <= 1.10x)",
            ["grading", "median s [IQR]"],
            [
                ["every process under bubblewrap", isolation["isolated_text"]],
                ["unisolated", isolation["unisolated_text"]],
                ["bubblewrap / unisolated, paired by round", f"{isolation['ratio_text']}: {isolation['verdict']}"],
            ],
        )
    path = write_json(
        args.out / "grader_benchmark.json",
        {
            "class": klass,
            "overhead": overhead,
            "batch": batch,
            "isolation": isolation,
            "course": str(args.course),
            "cores": cores,
        },
    )
    print(f"wrote {path}")
    return 0


def print_class(klass: dict[str, float]) -> None:
    print_table(
        "Scoring and reporting a class (target < 5 s)",
        ["what", "wall s", "CPU s"],
        [
            [f"re-score {klass['students']} students from their raw reports", klass["score_s"], klass["score_cpu_s"]],
            ["class report (CSV, JSON, HTML + charts)", klass["report_s"], klass["report_cpu_s"]],
            ["scoring + reporting", klass["total_s"], klass["total_cpu_s"]],
            ["(writing 3 output files per student)", klass["write_s"], "-"],
        ],
    )


if __name__ == "__main__":
    sys.exit(main())
