"""Nox sessions for the course.

Students:       nox -s lab01 lab02 lab03          (your code, CPU; arguments after -- go to pytest, e.g. -- --step 2)
                nox -s grade-me                   (grade your copy as the grader would: graded/me/feedback.md)
                nox -s bench-lab01 bench-lab02 bench-lab03  (~3 min, ~1 min, GPU; lab 1's long form: -- --full)
                nox -s report-lab02               (lab 2's NPU coverage report; -- --model all, -- --zoo, -- --draw)
                nox -s draw-lab01                 (lab 1's graphs before and after the pipeline, as pictures)
                nox -s zoo-lab02                  (lab 2's backend on its zoo: transformers, torchvision)
                nox -s gpu                        (on a CUDA machine: the GPU tests + lab 3's benchmark)
Environment:    nox -s course-env                 (create the shared environment; print its python)
                nox -s lint                       (ruff's lint and format check, as CI runs it; -- --fix rewrites)

Instructors' repository only (these skip, saying why, in the student distribution):
                nox -s grade                      (grade the reference and the untouched starters)
                nox -s solutions                  (every lab's tests against the reference)
                nox -s tests                      (the project's own tests, what CI runs; -- -m "not zoo" skips the zoo)
                nox -s zoo-lab01                  (lab 1's reference on every torchvision classifier, every dialect)
                nox -s mutation                   (mutants of the reference the tests kill: -- --lab lab01 --step 2)
                nox -s report-check               (the class report in headless Chromium: layout + screenshots)
                nox -s image image-cpu image-gpu  (build the course image; run sessions inside it)
                nox -s docker-test gradescope-test  (offline image build + grading in containers; slow)
                nox -s devcontainer-test          (the Dev Container on a student's copy, lab 3 inside it; slow)

All sessions but ``lint`` share ONE environment (``.nox/course-env``): PyTorch is ~5 GB, so it is installed once
and reinstalled only when ``pyproject.toml`` changes. Arguments after ``--`` go to pytest (or to the
script a session runs).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
SHARED_ENV = ROOT / ".nox" / "course-env"
LABS = {"lab01": "lab01_fx_passes", "lab02": "lab02_npu_backend", "lab03": "lab03_triton_lowering"}
#: The project's own tests, one home each: labkit's, the grader's, the course image's, and each lab's course
#: tests that need its reference (``solutions/<lab>/tests``: planted mistakes, benchmarks, lab 1's torchvision
#: zoo, marker ``zoo``, long). The graded tests themselves are each lab's ``test_lab.py``.
PROJECT_TESTS = ["labkit/tests", "grader/tests", "docker/tests", "solutions"]

nox.options.sessions = ["lab01", "lab02", "lab03"]
nox.options.error_on_missing_interpreters = True


def _bin(name: str) -> str:
    folder = "Scripts" if sys.platform == "win32" else "bin"
    return str(SHARED_ENV / folder / name)


def course_python(session: nox.Session) -> str:
    """Create the shared environment on first use (or when pyproject.toml changed) and return its python.

    Where the course is already installed (the container image sets ``COURSE_PYTHON``), use that
    interpreter as it is.
    """
    if os.environ.get("COURSE_PYTHON"):
        return os.environ["COURSE_PYTHON"]
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    stamp = SHARED_ENV / f".installed-{digest}"
    python = _bin("python")
    if not stamp.exists():
        if not Path(python).exists():
            session.log(f"creating the shared course environment in {SHARED_ENV}")
            session.run(sys.executable, "-m", "venv", str(SHARED_ENV), external=True)
        session.log("installing the course (torch is large: the first install takes a few minutes)")
        session.run(python, "-m", "pip", "install", "--disable-pip-version-check", "-e", f"{ROOT}[dev]", external=True)
        for old in SHARED_ENV.glob(".installed-*"):
            old.unlink()
        stamp.touch()
    if not any(SHARED_ENV.glob("[Ll]ib/*/site-packages/course-grader-pin.pth")) and not any(
        SHARED_ENV.glob("Lib/site-packages/course-grader-pin.pth")
    ):
        # `python -m grader` must mean the installed grader even when run from inside a student's copy.
        session.run(python, "-m", "grader.pin", external=True, silent=True)
    return python


def run_in_course_env(session: nox.Session, *args: str, env: dict[str, str] | None = None) -> None:
    """Run ``python *args`` in the shared environment, from the repository root."""
    python = course_python(session)
    session.chdir(ROOT)
    session.run(python, *args, external=True, env={"PYTHONUNBUFFERED": "1", **(env or {})})


def has_reference() -> bool:
    """True in the instructors' repository; the student distribution ships without ``solutions/``."""
    return (ROOT / "solutions").is_dir()


def default_impl() -> str:
    """The implementation scripts use unless LABKIT_IMPL says otherwise: the reference where it exists."""
    return os.environ.get("LABKIT_IMPL", "solution" if has_reference() else "student")


def require_reference(session: nox.Session) -> None:
    """Skip, saying why, a session that needs the reference solutions when they are absent."""
    if not has_reference():
        session.skip("instructor session: the reference solutions (solutions/) are not in the student distribution")


def _lab_session(lab_id: str, package: str) -> None:
    @nox.session(name=lab_id, venv_backend="none")
    def run_lab(session: nox.Session) -> None:
        # pytest through labkit.run_lab: a test that crashes the interpreter is named, the rest still
        # run and the step table is printed (-- --step N runs one handout step's tests).
        run_in_course_env(session, "-m", "labkit.run_lab", package, *session.posargs)

    run_lab.__doc__ = (
        f"Run {package}'s graded tests on CPU, on your code (anything after -- goes to pytest; "
        "-- --step N: one handout step's tests)."
    )


for _lab_id, _package in LABS.items():
    _lab_session(_lab_id, _package)


@nox.session(name="course-env", venv_backend="none")
def course_env(session: nox.Session) -> None:
    """Create (or update) the shared course environment and print its interpreter, for commands run by hand.

    In the instructors' repository it also gets the mutation tools the ``tests`` session uses, so that the
    environment is complete before anything runs from it (CI runs the zoos beside the test suite)."""
    python = course_python(session)
    if has_reference():
        install_mutation_tools(session)
    session.log(f"the course's Python: {os.path.relpath(python)}  (e.g. {os.path.relpath(python)} -m grader --help)")


@nox.session(name="grade-me", venv_backend="none")
def grade_me(session: nox.Session) -> None:
    """Grade this copy of the course as the grader would (graded/me/feedback.md); -- --labs lab01 for one lab."""
    run_in_course_env(session, "-m", "grader", "run", ".", "--out", "graded/me", *session.posargs)


@nox.session(name="report-lab02", venv_backend="none")
def report_lab02(session: nox.Session) -> None:
    """Lab 2's NPU coverage report (your code; the reference where present): -- --model all, --dialect aten."""
    run_in_course_env(
        session, "-m", "lab02_npu_backend.given.report", *session.posargs, env={"LABKIT_IMPL": default_impl()}
    )


@nox.session(name="draw-lab01", venv_backend="none")
def draw_lab01(session: nox.Session) -> None:
    """Lab 1's graphs before and after the pipeline as pictures (the reference where present): -- --model resnet50."""
    run_in_course_env(
        session, "-m", "lab01_fx_passes.given.draw_graphs", *session.posargs, env={"LABKIT_IMPL": default_impl()}
    )


@nox.session(name="zoo-lab02", venv_backend="none")
def zoo_lab02(session: nox.Session) -> None:
    """Lab 2's backend on its whole zoo (transformers, torchvision), both dialects (the reference where present)."""
    run_in_course_env(
        session,
        "-m",
        "pytest",
        "lab02_npu_backend/test_zoo.py",
        "-m",
        "zoo",
        f"--impl={default_impl()}",
        *session.posargs,
    )


@nox.session(venv_backend="none")
def solutions(session: nox.Session) -> None:
    """Run every lab's graded tests against the reference solutions."""
    require_reference(session)
    run_in_course_env(session, "-m", "pytest", *LABS.values(), "--impl=solution", *session.posargs)


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """The project's own test suite (CI): harness and grader tests, plus every lab against its reference
    (with cosmic-ray, so that the mutation testing's own test runs too)."""
    require_reference(session)
    install_mutation_tools(session)
    run_in_course_env(session, "-m", "pytest", *PROJECT_TESTS, *LABS.values(), "--impl=solution", *session.posargs)


#: The formatter and linter, pinned: a newer ruff may format differently, and CI must not turn red on its own.
RUFF = "ruff==0.17.6"


@nox.session
def lint(session: nox.Session) -> None:
    """ruff's linter and formatter over the tree, as configured in pyproject.toml (CI runs this check).

    In a small environment of its own (ruff only, no PyTorch); ``-- --fix`` rewrites instead of checking.
    """
    session.install(RUFF)
    if "--fix" in session.posargs:
        session.run("ruff", "check", "--fix", ".")
        session.run("ruff", "format", ".")
    else:
        session.run("ruff", "check", ".")
        session.run("ruff", "format", "--check", ".")


@nox.session(name="zoo-lab01", venv_backend="none")
def zoo_lab01(session: nox.Session) -> None:
    """Lab 1's reference on every torchvision classification model, every dialect: one shard per core.

    Tables in results/lab01/ (lab01_zoo.md is the handout's); -- --shards N, or pytest arguments after
    a second -- (e.g. -- -- -k resnet).
    """
    require_reference(session)
    run_in_course_env(session, "-m", "solutions.lab01_fx_passes.tests.run_zoo", *session.posargs)


@nox.session(venv_backend="none")
def grade(session: nox.Session) -> None:
    """The main job: grade the reference solutions and the untouched starters, print both summaries."""
    require_reference(session)
    run_in_course_env(session, "-m", "grader", "selfcheck", *session.posargs)


@nox.session(venv_backend="none")
def mutation(session: nox.Session) -> None:
    """Mutation testing of the reference solutions (python -m grader.mutation): how many mutants the tests kill.

    Arguments after -- go to the module, e.g. -- --lab lab01 --step 2 --sample 15 --seed 0 --json out.json.
    cosmic-ray (the ``mutation`` extra of pyproject.toml) is installed into the course environment on first use.
    """
    require_reference(session)
    install_mutation_tools(session)
    run_in_course_env(session, "-m", "grader.mutation", "--course", str(ROOT), *(session.posargs or ["--help"]))


def install_mutation_tools(session: nox.Session) -> None:
    """cosmic-ray (the ``mutation`` extra of pyproject.toml) into the course environment, unless it is there."""
    python = course_python(session)
    if subprocess.run([python, "-c", "import cosmic_ray"], capture_output=True, check=False).returncode != 0:
        import tomllib  # Python 3.11+, as the course itself (labkit.labspec)

        pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["mutation"]
        session.run(python, "-m", "pip", "install", "--disable-pip-version-check", *pins, external=True)


def _bench_session(lab_id: str, package: str) -> None:
    @nox.session(name=f"bench-{lab_id}", venv_backend="none")
    def bench(session: nox.Session) -> None:
        run_in_course_env(
            session, "-m", f"{package}.given.benchmark", *session.posargs, env={"LABKIT_IMPL": default_impl()}
        )

    bench.__doc__ = f"Benchmark {package} (the reference where present, unless LABKIT_IMPL says otherwise)."


for _lab_id, _package in LABS.items():
    _bench_session(_lab_id, _package)


@nox.session(venv_backend="none")
def gpu(session: nox.Session) -> None:
    """The GPU check (python -m grader.gpu_check): lab 3's suite, the grader with --gpu on, the benchmark; one JSON.

    Students (no reference): the @gpu tests of their own code. Skips without CUDA.
    """
    python = course_python(session)
    has_cuda = session.run(python, "-c", "import torch; print(torch.cuda.is_available())", external=True, silent=True)
    if "True" not in str(has_cuda):
        session.skip("no CUDA device on this machine: the GPU checks are graded as pending")
    if not has_reference():
        run_in_course_env(session, "-m", "pytest", *LABS.values(), "-m", "gpu", "-rs", *session.posargs)
        return
    run_in_course_env(session, "-m", "grader.gpu_check", *session.posargs)


@nox.session(name="report-check", venv_backend="none")
def report_check(session: nox.Session) -> None:
    """The class report of a demo class in headless Chromium: layout checks + screenshots in results/report-check/."""
    require_reference(session)
    sys.path.insert(0, str(ROOT))
    from grader.report.browser_check import BrowserError, find_chromium

    try:
        find_chromium()
    except BrowserError as error:
        session.skip(str(error))
    run_in_course_env(session, "-m", "grader.report.browser_check", *session.posargs)


# ---------------------------------------------------------------- the container image (Dockerfile)
# The engine is $GRADER_CONTAINER_ENGINE (e.g. "podman --runtime runc"), else docker or podman, whichever
# answers; the image's name is $COURSE_IMAGE. BASE_IMAGE and WHEELHOUSE pass through as build args.
COURSE_IMAGE = os.environ.get("COURSE_IMAGE", "torch-compile-labs:latest")
#: The same image with the reference solutions (the Dockerfile's `instructor` target), for the course's own tests.
INSTRUCTOR_IMAGE = os.environ.get("COURSE_INSTRUCTOR_IMAGE", COURSE_IMAGE.rsplit(":", 1)[0] + ":instructor")
OFFLINE_BASE_IMAGE = "localhost/course-base:bookworm"
OFFLINE_WHEELHOUSE = "build/wheelhouse"  # relative to the build context (.dockerignore lets it in)
CONTAINER_TEST_DIR = ROOT / "build" / "docker-test"
DEVCONTAINER_TEST_DIR = ROOT / "build" / "devcontainer-test"
#: What a student's copy of the course holds beside the release to build its Dev Container.
DEVCONTAINER_FILES = (".devcontainer", "Dockerfile", ".dockerignore", "docker")
#: The image's own user (the Dockerfile's useradd): who owns the checkout when the test runs as root.
IMAGE_UID = 10001


def container_engine(session: nox.Session) -> list[str]:
    """The container engine's command, or skip the session saying why."""
    sys.path.insert(0, str(ROOT))
    from grader.runners.container import ContainerError, find_engine

    try:
        return find_engine()
    except ContainerError as error:
        session.skip(f"no container engine on this machine ({error}): the image sessions need docker or podman")
    raise AssertionError("unreachable")


def build_image(
    session: nox.Session, engine: list[str], tag: str, build_args: dict[str, str], target: str | None = None
) -> None:
    flags = [f"--build-arg={name}={value}" for name, value in build_args.items() if value]
    flags += ["--target", target] if target else []
    session.run(*engine, "build", *flags, "--tag", tag, str(ROOT), external=True)


def run_in_image(
    session: nox.Session, engine: list[str], nox_args: list[str], *, gpus: bool = False, out: Path | None = None
) -> None:
    """Run ``nox nox_args`` inside the instructor image, network off (it has the course and its solutions installed).

    ``out``: a host folder mounted at ``/out`` (the course in the image is read-only).
    """
    from grader.runners.container import ContainerLimits, gpu_args, isolation_args

    limits = ContainerLimits(memory=os.environ.get("CONTAINER_MEMORY", "12g"), cpus=float(os.cpu_count() or 1))
    volume = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        volume = ["--volume", f"{out}:/out"]
    session.run(
        *engine,
        "run",
        "--rm",
        *isolation_args(limits),
        *(gpu_args(engine) if gpus else []),
        *volume,
        "--entrypoint",
        "nox",
        INSTRUCTOR_IMAGE,
        *nox_args,
        external=True,
    )


def has_nvidia_gpu() -> bool:
    """True when the host's NVIDIA driver lists at least one GPU."""
    if not shutil.which("nvidia-smi"):
        return False
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return listed.returncode == 0 and "GPU" in listed.stdout


@nox.session(venv_backend="none")
def image(session: nox.Session) -> None:
    """Build the grading image ($COURSE_IMAGE, no solutions) and its instructor target (with them; build args
    from $BASE_IMAGE and $WHEELHOUSE when set)."""
    engine = container_engine(session)
    build_args = {"BASE_IMAGE": os.environ.get("BASE_IMAGE", ""), "WHEELHOUSE": os.environ.get("WHEELHOUSE", "")}
    build_image(session, engine, COURSE_IMAGE, build_args)
    build_image(session, engine, INSTRUCTOR_IMAGE, build_args, target="instructor")


@nox.session(name="image-cpu", venv_backend="none")
def image_cpu(session: nox.Session) -> None:
    """Run CPU sessions inside the image, network off (default: tests; or -- -s lab01 lab02 ...)."""
    run_in_image(session, container_engine(session), session.posargs or ["-s", "tests"])


@nox.session(name="image-gpu", venv_backend="none")
def image_gpu(session: nox.Session) -> None:
    """Run the gpu session (the GPU check) inside the image with every GPU passed in; results in results/image-gpu/.

    Skips without an NVIDIA GPU.
    """
    engine = container_engine(session)
    if not has_nvidia_gpu():
        session.skip("no NVIDIA GPU on this machine (nvidia-smi finds none): the GPU sessions need one")
    run_in_image(
        session,
        engine,
        session.posargs or ["-s", "gpu", "--", "--out", "/out/gpu-check"],
        gpus=True,
        out=ROOT / "results" / "image-gpu",
    )


@nox.session(name="docker-test", venv_backend="none")
def docker_test(session: nox.Session) -> None:
    """The image built and graded with no registry and no network (slow: not part of CI).

    A Debian base image from debootstrap, a wheelhouse from pyproject.toml, the image built offline from
    both (same Dockerfile, other build args), then the reference solutions and the untouched starters
    graded, each in its own container with the network off. Set BASE_IMAGE to skip debootstrap.
    """
    engine = container_engine(session)
    base = os.environ.get("BASE_IMAGE", "")
    if not base:
        if not shutil.which("debootstrap"):
            session.skip("debootstrap is not installed (apt-get install debootstrap), and BASE_IMAGE is not set")
        base = OFFLINE_BASE_IMAGE
        session.run(
            "bash", "docker/build-base-image.sh", base, external=True, env={"CONTAINER_ENGINE": shlex.join(engine)}
        )
    python = course_python(session)
    session.run("bash", "docker/build-wheelhouse.sh", OFFLINE_WHEELHOUSE, external=True, env={"PYTHON": python})
    tag = os.environ.get("COURSE_IMAGE", "localhost/torch-compile-labs:offline")
    build_image(session, engine, tag, {"BASE_IMAGE": base, "WHEELHOUSE": OFFLINE_WHEELHOUSE})
    run_in_course_env(
        session,
        "-m",
        "grader",
        "selfcheck",
        "--container",
        tag,
        "--engine",
        shlex.join(engine),
        "--out",
        str(CONTAINER_TEST_DIR),
        *session.posargs,
    )


@nox.session(name="gradescope-test", venv_backend="none")
def gradescope_test(session: nox.Session) -> None:
    """The Gradescope bundle installed and run as Gradescope would, in a container with no network (slow).

    setup.sh installs from the wheelhouse (as docker-test makes it) in a fresh container of the Debian
    base image, then run_autograder grades the reference solutions: results.json must give them every
    CPU point (GPU points pending).
    """
    engine = container_engine(session)
    base = os.environ.get("BASE_IMAGE", OFFLINE_BASE_IMAGE)
    if base == OFFLINE_BASE_IMAGE:
        session.run(
            "bash", "docker/build-base-image.sh", base, external=True, env={"CONTAINER_ENGINE": shlex.join(engine)}
        )
    python = course_python(session)
    session.run("bash", "docker/build-wheelhouse.sh", OFFLINE_WHEELHOUSE, external=True, env={"PYTHON": python})
    work = ROOT / "build" / "gradescope-test"
    shutil.rmtree(work, ignore_errors=True)
    run_in_course_env(session, "-m", "grader", "gradescope-bundle", "--out", str(work / "autograder.zip"))
    run_in_course_env(
        session,
        "-c",
        "import sys; from pathlib import Path; from grader.course.labs import load_course, "
        "make_reference_submission as make; make(load_course(), Path(sys.argv[1]))",
        str(work / "submission"),
    )
    from grader.runners.container import ContainerLimits, isolation_args

    script = (ROOT / "docker" / "gradescope-local-run.sh").read_text()
    limits = ContainerLimits(memory="12g", cpus=float(os.cpu_count() or 1))
    session.run(
        *engine,
        "run",
        "--rm",
        *isolation_args(limits, as_root=True),
        "--env",
        "PIP_NO_INDEX=1",
        "--env",
        "PIP_FIND_LINKS=/wheelhouse",
        "--volume",
        f"{ROOT / OFFLINE_WHEELHOUSE}:/wheelhouse:ro",
        "--volume",
        f"{work}:/bundle",
        base,
        "bash",
        "-c",
        script,
        external=True,
    )


def engine_program(engine: list[str], folder: Path) -> Path:
    """One program for the Dev Containers CLI's ``--docker-path``: the engine with its global options
    (``podman --runtime runc``), starting every container with the open-file and process limits the
    course's containers get (an engine's defaults can exceed what the host allows). The CLI asks podman
    for ``--userns=keep-id``, which only rootless podman has: run by root, that option is left out."""
    from grader.runners.container import ContainerLimits

    limits = ContainerLimits()
    ulimits = (
        f"--ulimit nofile={limits.open_files}:{limits.open_files} --ulimit nproc={limits.processes}:{limits.processes}"
    )
    program = folder / "engine"
    program.write_text(f"""#!/bin/sh
case "$1" in
    run|create)
        command="$1"; shift
        for argument do
            shift
            [ "$argument" = --userns=keep-id ] && [ "$(id -u)" = 0 ] && continue
            set -- "$@" "$argument"
        done
        exec {shlex.join(engine)} "$command" {ulimits} "$@" ;;
esac
exec {shlex.join(engine)} "$@"
""")
    program.chmod(0o755)
    return program


def starter_verdict(output: str) -> str:
    """What ``nox -s lab03`` printed on the untouched starter, in one line; raises unless it scored 0
    with no collection error."""
    total = re.search(r"^total\s+(\d+)/(\d+)\s+(\d+)/(\d+)", output, re.MULTILINE)
    summary = re.findall(r"^=+ (.+) in [\d.]+s", output, re.MULTILINE)
    if total is None or not summary:
        raise ValueError("no step table or no pytest summary in the output")
    if "error" in summary[-1] or "ERROR collecting" in output:
        raise ValueError(f"collection errors: {summary[-1]}")
    if total[1] != "0" or total[3] != "0":
        raise ValueError(f"the untouched starter scored: {total[0]}")
    return f"{total[3]}/{total[4]} points, {total[1]}/{total[2]} tests passed; pytest: {summary[-1]}"


@nox.session(name="devcontainer-test", venv_backend="none")
def devcontainer_test(session: nox.Session) -> None:
    """The Dev Container opened on a student's copy of the course with the Dev Containers CLI (slow: not part of CI).

    A copy of the student release (``grader release``) with the container's definition beside it
    (.devcontainer/, Dockerfile, docker/), ``devcontainer up`` on it (the image built from the
    Dockerfile's student target), then inside it what a student would check: the installed environment
    is the one in use, the lab imports from the checkout, the image's course has no solutions and no
    held-out tests, and ``python3 -m nox -s lab03`` on the untouched starter scores 0 with every test
    collected. BASE_IMAGE and WHEELHOUSE, when set, replace the definition's base image and package
    index (an offline machine, as docker-test builds them): the CLI takes no build arguments, so they
    go into the checkout's copy of devcontainer.json.
    """
    require_reference(session)
    engine = container_engine(session)
    cli = shutil.which("devcontainer")
    if cli is None:
        session.skip("the Dev Containers CLI is not installed (npm install -g @devcontainers/cli)")
    from grader.runners.container import is_podman

    checkout = DEVCONTAINER_TEST_DIR / "torch-compile-labs"  # the folder a student's clone would be
    shutil.rmtree(checkout, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="devcontainer-test-") as scratch:  # the release is built outside the course
        run_in_course_env(session, "-m", "grader", "release", "--out", f"{scratch}/release", "--no-verify")
        checkout.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(f"{scratch}/release", checkout)
    for name in DEVCONTAINER_FILES:
        source = ROOT / name
        shutil.copytree(source, checkout / name) if source.is_dir() else shutil.copy2(source, checkout / name)
    config = checkout / ".devcontainer" / "devcontainer.json"
    build_args = {name: os.environ[name] for name in ("BASE_IMAGE", "WHEELHOUSE") if os.environ.get(name)}
    if build_args:  # the CLI reads only files named devcontainer.json: the checkout's copy gets them
        definition = json.loads(config.read_text())
        definition["build"].setdefault("args", {}).update(build_args)
        config.write_text(json.dumps(definition, indent=2) + "\n")
        session.log(f"build arguments {definition['build']['args']} in the checkout's {config.relative_to(checkout)}")
    if os.getuid() == 0:
        # Run by root, the CLI leaves `course` its own uid (it gives it the caller's uid otherwise, so that a
        # student's files stay writable): the checkout is given to that uid instead, but for the files the
        # image's environment stages copy (an owner is part of a layer's key: as they are, those come from
        # the cache of an image built from the repository).
        kept = {checkout / "pyproject.toml", checkout / "docker"}
        for path in [checkout, *checkout.rglob("*")]:
            if not {path, *path.parents} & kept:
                os.lchown(path, IMAGE_UID, IMAGE_UID)
    if build_args.get("WHEELHOUSE"):  # inside the build context, as the Dockerfile expects it (links: only read)
        shutil.copytree(ROOT / build_args["WHEELHOUSE"], checkout / build_args["WHEELHOUSE"], copy_function=os.link)
    # The checkout is the workspace, not the git repository around it (a student's clone is its own).
    where = [
        "--docker-path",
        str(engine_program(engine, DEVCONTAINER_TEST_DIR)),
        "--workspace-folder",
        str(checkout),
        "--config",
        str(config),
        "--mount-workspace-git-root=false",
    ]
    up = [cli, "up", *where, "--remove-existing-container", *(["--buildkit", "never"] if is_podman(engine) else [])]
    session.log(shlex.join(up))
    done = subprocess.run(up, stdout=subprocess.PIPE, text=True, check=False)  # its log (the build) on stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}
    if outcome.get("outcome") != "success":
        session.error(f"devcontainer up failed (exit {done.returncode}): {done.stdout.strip()[-2000:]}")
    session.log(
        f"container {outcome['containerId'][:12]}: user {outcome['remoteUser']}, "
        f"workspace {outcome['remoteWorkspaceFolder']}"
    )
    try:
        probe = session.run(cli, "exec", *where, "sh", "-c", DEVCONTAINER_PROBE, external=True, silent=True)
        print(probe)
        facts = dict(line.split(" ", 1) for line in probe.splitlines() if " " in line)
        problems = [
            f"{fact}: {facts.get(fact)!r}"
            for fact, ok in (
                ("python", facts.get("python", "").startswith("/opt/venv/")),
                ("lab03", facts.get("lab03", "").startswith(outcome["remoteWorkspaceFolder"] + "/")),
                ("instructor-files", facts.get("instructor-files") == "0"),
            )
            if not ok
        ]
        if problems:
            session.error("in the container: " + "; ".join(problems))
        command = ["python3", "-m", "nox", "-s", "lab03"]
        session.log(f"devcontainer exec ... {shlex.join(command)}")
        output = session.run(cli, "exec", *where, *command, external=True, silent=True, success_codes=[0, 1])
        print(output)
        try:
            session.log(f"lab 3's untouched starter in the Dev Container: {starter_verdict(output)}")
        except ValueError as error:
            session.error(f"lab 3's starter in the Dev Container: {error}")
    finally:
        session.run(*engine, "rm", "--force", outcome["containerId"], external=True, silent=True)


#: What the Dev Container test asks inside the container, one fact per line (checked by devcontainer_test).
DEVCONTAINER_PROBE = """
echo "python $(command -v python3) -> $(python3 -c 'import sys; print(sys.executable)')"
echo "COURSE_PYTHON ${COURSE_PYTHON:-unset}"
echo "lab03 $(python3 -c 'import lab03_triton_lowering as lab; print(lab.__file__)')"
echo "instructor-files $(find /opt/course -name solutions -o -name heldout -o -name tests -path '*/labkit/*' | wc -l)"
echo "git $(git --version 2>/dev/null || echo missing)"
echo "user $(id -un) $(id -u)"
"""
