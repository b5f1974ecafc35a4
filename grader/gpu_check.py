"""The GPU check in one command, for a CUDA machine that brings its own PyTorch and has no package index.

    python -m grader.gpu_check [--wheelhouse .whl] [--out results/gpu-check]

Shared GPU machines often come with their own Python and PyTorch (say 2.11 with Triton 3.6; the
course supports ``[tool.course.supported]`` in ``pyproject.toml`` beside its pins) and cannot reach
a package index. From a checkout of the course, this command:

1. **installs what is missing** and nothing else: the wheels in ``--wheelhouse`` whose packages are
   not importable yet (``pip install --no-index --no-deps``), then the course itself in editable mode
   (``pip install --no-deps -e .``) unless the grader is already importable from outside the checkout;
2. **runs lab 3's suite** against the reference (``pytest lab03_triton_lowering --impl=solution``):
   every test, GPU and CPU, in one process (CPU launches take Triton's interpreter even here);
3. **grades** the reference and the untouched starter through the real grading path with the GPU on
   (``python -m grader selfcheck --labs lab03 --gpu on``): the reference must earn every point, the
   starter none;
4. **benchmarks** the kernel (``python -m lab03_triton_lowering.given.benchmark``, the reference);

and writes everything to ``OUT/gpu-check.json`` (each step's log beside it), then prints one summary.
The exit status is 0 only when the suite passed, the reference earned every point and the starter 0.

Making the wheelhouse, on any machine with an index (Python version of the GPU machine's)::

    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d .whl \\
        pytest-json-report pytest-metadata jsonschema jsonschema-specifications referencing rpds-py

Only the packages the machine lacks are installed from it, so one wheelhouse serves several machines.
Run it from the repository root; this module needs only the standard library until step 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAB = "lab03"
PACKAGE = "lab03_triton_lowering"
#: importable module -> distribution, for what a graded run imports beyond a GPU machine's usual stack.
NEEDED_MODULES = {
    "pytest_jsonreport": "pytest-json-report",
    "pytest_metadata": "pytest-metadata",
    "jsonschema": "jsonschema",
    "hypothesis": "hypothesis",
    "rich": "rich",
    "matplotlib": "matplotlib",
    "transformers": "transformers",  # lab 2's real models; every lab's import checks the course's packages
    "submitit": "submitit",  # the course's pinned packages, checked when a lab is imported
    "pydot": "pydot",
    "copydetect": "copydetect",
}


def missing_modules() -> list[str]:
    """The distributions of :data:`NEEDED_MODULES` that this interpreter cannot import."""
    return [dist for module, dist in NEEDED_MODULES.items() if importlib.util.find_spec(module) is None]


def wheels_for(wheelhouse: Path, distributions: list[str]) -> list[Path]:
    """The wheels in ``wheelhouse`` of the named distributions and of their missing dependencies.

    Wheel names normalise ``-`` to ``_``; a dependency the interpreter already has is left alone,
    one it lacks is taken when the wheelhouse holds it (e.g. jsonschema's ``referencing``).
    """
    wanted = {dist.replace("-", "_").lower() for dist in distributions}
    chosen = []
    for wheel in sorted(wheelhouse.glob("*.whl")):
        name = wheel.name.split("-")[0].lower()
        if name in wanted or importlib.util.find_spec(name) is None:
            chosen.append(wheel)
    return chosen


def run_logged(
    command: list[str], log: Path, *, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> tuple[int, float]:
    """Run ``command``, streaming its output to the terminal and to ``log``; return (exit status, seconds)."""
    print(f"$ {' '.join(command)}   (log: {log})", flush=True)
    start = time.perf_counter()
    with log.open("w") as sink:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            sink.write(line)
        status = process.wait()
    return status, time.perf_counter() - start


def install_missing(wheelhouse: Path | None, out: Path) -> list[str]:
    """Install the missing wheels and the course (see the module docstring); return what was installed."""
    installed = []
    missing = missing_modules()
    if missing:
        if wheelhouse is None:
            raise SystemExit(
                f"missing {', '.join(missing)}: pass --wheelhouse DIR with their wheels "
                "(how to make it: python -m grader.gpu_check --help)"
            )
        wheels = wheels_for(wheelhouse, missing)
        status, _ = run_logged(
            [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", *map(str, wheels)],
            out / "install-wheels.log",
        )
        if status != 0 or missing_modules():
            raise SystemExit(f"could not install {', '.join(missing_modules()) or 'the wheels'} from {wheelhouse}")
        installed += [wheel.name for wheel in wheels]
    outside = subprocess.run([sys.executable, "-c", "import grader.execute.probe"], cwd=out, capture_output=True)
    if outside.returncode != 0:  # graded pytest processes import the grader from outside the checkout
        status, _ = run_logged(
            [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-e", str(ROOT)],
            out / "install-course.log",
        )
        if status != 0:
            raise SystemExit(f"could not install the course in editable mode (see {out / 'install-course.log'})")
        installed.append("the course (editable)")
    return installed


def suite_summary(report: Path) -> dict:
    """Outcome counts of a pytest-json-report file, GPU tests counted apart."""
    data = json.loads(report.read_text())
    counts: dict[str, int] = {}
    gpu: dict[str, int] = {}
    failed = []
    for test in data.get("tests", []):
        counts[test["outcome"]] = counts.get(test["outcome"], 0) + 1
        if "gpu" in test.get("keywords", []):
            gpu[test["outcome"]] = gpu.get(test["outcome"], 0) + 1
        if test["outcome"] not in ("passed", "skipped"):
            failed.append(test["nodeid"])
    return {"counts": counts, "gpu_tests": gpu, "not_passed": failed, "duration_s": data.get("duration")}


def grade_summary(graded: Path) -> dict:
    """Each graded submission's lab 3 score from its ``summary.json``."""
    result = {}
    for name in ("reference", "starter"):
        summary = json.loads((graded / name / "summary.json").read_text())
        lab = summary["labs"][LAB]
        result[name] = {key: lab[key] for key in ("score", "max_score", "pending", "status", "wall_s")}
    return result


def versions() -> dict:
    import torch
    import triton

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m grader.gpu_check",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    parser.add_argument("--wheelhouse", type=Path, help="folder of wheels for the packages this machine lacks")
    parser.add_argument("--out", type=Path, default=Path("results/gpu-check"), help="where the JSON and logs go")
    parser.add_argument("--no-bench", action="store_true", help="skip the benchmark")
    parser.add_argument("--bench-args", default="", help="extra arguments for the benchmark (e.g. '--tune')")
    args = parser.parse_args(argv)
    out = args.out.expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    wheelhouse = args.wheelhouse.expanduser().resolve() if args.wheelhouse else None

    import torch  # the GPU machine's own; asked first, so a machine without CUDA installs nothing

    if not torch.cuda.is_available():
        print("no CUDA device here: the GPU check needs one (on CPU, `nox -s tests` checks everything else)")
        return 2
    record: dict = {"installed": install_missing(wheelhouse, out)}

    def save() -> None:  # after every step: a check cut short still leaves what it measured
        (out / "gpu-check.json").write_text(json.dumps(record, indent=2, default=str))

    record["versions"] = versions()
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["PYTHONUNBUFFERED"] = "1"

    report = out / "suite-report.json"
    status, seconds = run_logged(
        [
            sys.executable,
            "-m",
            "pytest",
            PACKAGE,
            "--impl=solution",
            "-p",
            "no:cacheprovider",
            "-q",
            "--json-report",
            f"--json-report-file={report}",
        ],
        out / "suite.log",
        env=env,
    )
    record["suite"] = {
        "exit_status": status,
        "wall_s": round(seconds, 1),
        **(suite_summary(report) if report.exists() else {"error": "no report"}),
    }
    save()

    graded = out / "graded"
    status, seconds = run_logged(
        [sys.executable, "-m", "grader", "selfcheck", "--labs", LAB, "--gpu", "on", "--out", str(graded)],
        out / "grade.log",
        env=env,
    )
    record["grade"] = {"exit_status": status, "wall_s": round(seconds, 1)}
    try:
        record["grade"].update(grade_summary(graded))
    except (OSError, KeyError, ValueError) as error:
        record["grade"]["error"] = f"no summary: {error}"
    save()

    if not args.no_bench:
        bench_out = out / "benchmark"
        status, seconds = run_logged(
            [sys.executable, "-m", f"{PACKAGE}.given.benchmark", "--out", str(bench_out), *args.bench_args.split()],
            out / "benchmark.log",
            env={**env, "LABKIT_IMPL": "solution"},
        )
        record["benchmark"] = {"exit_status": status, "wall_s": round(seconds, 1)}
        if (bench_out / "benchmark.json").exists():
            record["benchmark"].update(json.loads((bench_out / "benchmark.json").read_text()))

    save()
    return print_summary(record, out)


def print_summary(record: dict, out: Path) -> int:
    """Print the one-screen summary; return the exit status (0: suite passed, reference full, starter 0)."""
    suite, grade = record.get("suite", {}), record.get("grade", {})
    reference, starter = grade.get("reference", {}), grade.get("starter", {})
    print(
        f"\n== GPU check on {record['versions']['gpu']} (torch {record['versions']['torch']}, "
        f"triton {record['versions']['triton']}, Python {record['versions']['python']})"
    )
    print(
        f"lab 3 suite (reference): {suite.get('counts')} (GPU tests: {suite.get('gpu_tests')}) "
        f"in {suite.get('wall_s')} s"
    )
    for name, result in (("reference", reference), ("starter", starter)):
        if result:
            print(
                f"grader --gpu on, {name}: {result['score']}/{result['max_score']} (pending {result['pending']}, "
                f"{result['status']}) in {result['wall_s']:.0f} s"
            )
    for row in record.get("benchmark", {}).get("verdicts", []):
        print(f"  {row['verdict']:<21} {row['target']}")
    print(f"everything: {out / 'gpu-check.json'}")
    ok = (
        suite.get("exit_status") == 0
        and reference.get("score") == reference.get("max_score")
        and reference.get("pending") == 0
        and starter.get("score") == 0
    )
    print("ok" if ok else "PROBLEMS: see above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
