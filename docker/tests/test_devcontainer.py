"""The Dev Container students open (``.devcontainer/devcontainer.json``) and the image it builds.

No container engine is needed: the definition is read as JSON, the ``Dockerfile`` is read stage by
stage, and the student target's course comes from ``python -m grader release``, which is run here the
way its build stage runs it. Building and opening the container for real is ``nox -s devcontainer-test``.
"""

from __future__ import annotations

import importlib
import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from labkit.labspec import COURSE_ROOT, HELDOUT_DIR

DEVCONTAINER = COURSE_ROOT / ".devcontainer" / "devcontainer.json"
DOCKERFILE = COURSE_ROOT / "Dockerfile"
#: The stages holding instructor material: the reference solutions (set aside in ``source``, copied back
#: in ``instructor``) or the held-out tests (the grading image: ``course`` and ``grader``).
INSTRUCTOR_STAGES = {"source", "course", "instructor", "grader"}
#: What the student target may take from other stages: the environment, and the release.
STUDENT_COPIES = {("deps", "/opt/venv"), ("student-release", "/opt/student")}
#: Where the student-release stage writes the distribution.
RELEASE_OUT = "/opt/student"
#: The line opening an instructor-only section of a Markdown file (the release removes them).
INSTRUCTOR_MARKER = "<!-- instructor-only -->"


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)  # (INSTRUCTION, its arguments)

    def copies(self) -> list[tuple[str | None, list[str]]]:
        """Each COPY/ADD as (the stage it copies from, or None for the build context; its sources)."""
        found = []
        for instruction, arguments in self.instructions:
            if instruction in ("COPY", "ADD"):
                words = shlex.split(arguments)
                origin = next((w.split("=", 1)[1] for w in words if w.startswith("--from=")), None)
                paths = [w for w in words if not w.startswith("--")]
                found.append((origin, paths[:-1]))
        return found

    def runs(self) -> list[str]:
        return [arguments for instruction, arguments in self.instructions if instruction == "RUN"]


def dockerfile_stages(text: str) -> list[Stage]:
    """The stages of a Dockerfile, in order (comments dropped, continued lines joined)."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    logical = re.sub(r"\\\n", " ", "\n".join(lines))
    stages: list[Stage] = []
    for line in logical.splitlines():
        if not line.strip():
            continue
        instruction, _, arguments = line.strip().partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            words = arguments.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(name, words[0]))
        elif stages:
            stages[-1].instructions.append((instruction, arguments.strip()))
    return stages


def stages_behind(target: str, stages: list[Stage]) -> set[str]:
    """Every stage ``target`` is built from: its base, the stages it copies from, and theirs."""
    by_name = {stage.name: stage for stage in stages}
    seen: set[str] = set()
    pending = [target]
    while pending:
        stage = by_name[pending.pop()]
        for name in [stage.base, *(origin for origin, _ in stage.copies() if origin)]:
            if name in by_name and name not in seen:
                seen.add(name)
                pending.append(name)
    return seen


@pytest.fixture(scope="module")
def config() -> dict:
    return json.loads(DEVCONTAINER.read_text(encoding="utf-8"))  # plain JSON: no comments, no trailing commas


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return dockerfile_stages(DOCKERFILE.read_text(encoding="utf-8"))


def test_the_devcontainer_builds_the_student_target_of_the_course_dockerfile(config, stages):
    build = config["build"]
    assert build["target"] == "student"
    assert (DEVCONTAINER.parent / build["dockerfile"]).resolve() == DOCKERFILE
    assert (DEVCONTAINER.parent / build["context"]).resolve() == COURSE_ROOT
    assert "student" in [stage.name for stage in stages]
    # Only build arguments the Dockerfile declares (a misspelt one would be ignored without a word).
    declared = set(re.findall(r"^\s*ARG\s+(\w+)", DOCKERFILE.read_text(encoding="utf-8"), re.MULTILINE))
    assert set(build.get("args", {})) <= declared


def test_the_default_target_is_still_the_grading_image(stages):
    assert stages[-1].name == "grader" and stages[-1].base == "course"


def test_the_container_finds_the_installed_environment(config, stages):
    student = next(stage for stage in stages if stage.name == "student")
    env = " ".join(arguments for instruction, arguments in student.instructions if instruction == "ENV")
    assert "COURSE_PYTHON=/opt/venv/bin/python" in env and "PATH=/opt/venv/bin:$PATH" in env
    assert any("grader.pin" in run for run in student.runs())
    # A login shell (how the Dev Containers tools read the environment) resets PATH from /etc/profile.
    assert config["remoteEnv"]["PATH"].startswith("/opt/venv/bin:")
    assert config["remoteUser"] == "course" and "--user-group" in " ".join(student.runs())


def test_the_student_target_takes_nothing_from_the_instructor_stages(stages):
    assert not stages_behind("student", stages) & INSTRUCTOR_STAGES
    student = next(stage for stage in stages if stage.name == "student")
    copies = {(origin, source) for origin, sources in student.copies() for source in sources}
    assert copies == STUDENT_COPIES, "the student image holds the environment and the release, nothing else"


def test_the_student_course_is_what_the_release_command_writes(stages):
    release = next(stage for stage in stages if stage.name == "student-release")
    writers = [run for run in release.runs() if RELEASE_OUT in run]
    assert len(writers) == 1
    words = shlex.split(writers[0].split("&&")[-1])
    assert words[words.index("-m") + 1 : words.index("-m") + 3] == ["grader", "release"]
    assert words[words.index("--out") + 1] == RELEASE_OUT


@pytest.fixture(scope="module")
def release(tmp_path_factory, stages) -> Path:
    """The student release, made by the command the student-release stage runs (with this course as input)."""
    stage = next(stage for stage in stages if stage.name == "student-release")
    command = shlex.split(next(run for run in stage.runs() if RELEASE_OUT in run).split("&&")[-1])
    python = next(index for index, word in enumerate(command) if word.endswith("python"))
    arguments = command[python + 1 :]
    out = tmp_path_factory.mktemp("release") / "student"
    arguments[arguments.index("--course") + 1] = str(COURSE_ROOT)
    arguments[arguments.index("--out") + 1] = str(out)
    done = subprocess.run([sys.executable, *arguments], cwd=COURSE_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out


def test_the_release_command_leaves_out_solutions_heldout_tests_and_instructor_sections(release):
    shipped = {path.relative_to(release).as_posix() for path in release.rglob("*")}
    assert {"lab03_triton_lowering/test_lab.py", "lab03_triton_lowering/kernel.py", "noxfile.py"} <= shipped
    assert not [path for path in shipped if path.split("/")[0] == "solutions"]
    assert not [path for path in shipped if HELDOUT_DIR in path.split("/")]
    assert not [path for path in shipped if path.startswith(("labkit/tests", "grader/tests", "docker/tests"))]
    documents = [release / path for path in shipped if path.endswith(".md")]
    assert documents and not [path for path in documents if INSTRUCTOR_MARKER in path.read_text(encoding="utf-8")]


def test_the_release_stage_copies_every_input_of_the_release_and_never_the_solutions(release, stages):
    stage = next(stage for stage in stages if stage.name == "student-release")
    copied = {Path(source).as_posix() for origin, sources in stage.copies() if origin is None for source in sources}
    assert "." not in copied and not [path for path in copied if path.split("/")[0] == "solutions"]
    # The release of the copied files equals the release of the whole course only if each of its
    # top-level entries is copied in: a new lab or root file must be added to the stage too.
    assert {path.name for path in release.iterdir()} <= copied


def test_the_devcontainer_check_passes_only_a_starter_that_scores_0_with_every_test_collected():
    verdict = importlib.import_module("noxfile").starter_verdict  # what nox -s devcontainer-test decides with
    table = "step  file  passed  points  status\ntotal                     {}/89    {}/142  (32 pending)\n"
    summary = "============== 4 failed, 15 skipped, 70 not implemented{} in 38.83s ==============\n"
    assert verdict(table.format(0, 0) + summary.format("")) == (
        "0/142 points, 0/89 tests passed; pytest: 4 failed, 15 skipped, 70 not implemented"
    )
    with pytest.raises(ValueError, match=r"scored: total +1/89 +2/142"):
        verdict(table.format(1, 2) + summary.format(""))
    with pytest.raises(ValueError, match="collection errors"):
        verdict(table.format(0, 0) + summary.format(", 1 error"))
    with pytest.raises(ValueError, match="no step table"):
        verdict(summary.format(""))
