"""Grading in containers: the command each container runs, the engine search, and a whole batch.

No container engine is needed: ``fake_engine.py`` speaks docker's command line and grades on the host
(or hangs, or dies as an out-of-memory kill would), so every path of the runner is exercised here.
The image itself is tested for real by the ``docker-test`` nox session.
"""

from __future__ import annotations

import json
import stat
import sys
import zipfile
from pathlib import Path

import pytest

from grader.__main__ import main as grader_main
from grader.evidence.layout import SUMMARY_FILE
from grader.runners.batch import BATCH_FILE, grade_all
from grader.runners.container import (
    CONTAINER_LOG,
    ContainerError,
    ContainerLimits,
    ContainerRunner,
    find_engine,
    run_command,
)
from grader.scoring.results import SubmissionResult
from grader.tests.corpus import DEMO_COURSE, materialize, starter_copy

FAKE_ENGINE = Path(__file__).parent.parent / "fake_engine.py"
DEMO_CPU_MAX = 23  # labA 10 + 6 held-out, labB 4 + 3 held-out (labB's other 3 points need a GPU: pending here)


def values(command: list[str], flag: str) -> list[str]:
    return [value for option, value in zip(command, command[1:]) if option == flag]


@pytest.fixture
def engine(tmp_path, monkeypatch) -> list[str]:
    state = tmp_path / "engine-state"
    state.mkdir()
    monkeypatch.setenv("FAKE_ENGINE_STATE", str(state))
    monkeypatch.setenv("FAKE_ENGINE_COURSE", str(DEMO_COURSE))
    return [sys.executable, str(FAKE_ENGINE)]


def engine_calls(tmp_path) -> list[list[str]]:
    lines = (tmp_path / "engine-state" / "calls.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def summary(out: Path) -> SubmissionResult:
    return SubmissionResult.from_dict(json.loads((out / SUMMARY_FILE).read_text()))


# ---------------------------------------------------------------- the container's command line


def test_run_command_isolates_and_limits_the_container(tmp_path):
    submission, out = tmp_path / "alice", tmp_path / "out"
    submission.mkdir()
    out.mkdir()
    limits = ContainerLimits(memory="3g", cpus=1.5, pids=100, open_files=512)
    command = run_command(
        ["docker"],
        "course:1",
        name="grader-alice",
        submission=submission,
        out=out,
        limits=limits,
        grader_args=["--gpu", "off"],
        gpus=False,
    )
    assert values(command, "--network") == ["none"]
    assert values(command, "--cap-drop") == ["ALL"]
    assert values(command, "--memory") == ["3g"] and values(command, "--memory-swap") == ["3g"]  # no swap on top
    assert values(command, "--cpus") == ["1.5"] and values(command, "--pids-limit") == ["100"]
    assert "nofile=512:512" in values(command, "--ulimit")
    assert "OMP_NUM_THREADS=1" in values(command, "--env")
    assert values(command, "--mount") == [
        f"type=bind,source={submission.resolve()},target=/submission,readonly",
        f"type=bind,source={out.resolve()},target=/out",
    ]
    assert "--gpus" not in command
    image_at = command.index("course:1")
    assert command[image_at + 1 :] == ["run", "/submission", "--out", "/out", "--gpu", "off"]


def test_run_command_passes_gpus_and_zip_submissions(tmp_path):
    archive = tmp_path / "bob.zip"
    zipfile.ZipFile(archive, "w").close()
    common = dict(name="n", submission=archive, out=tmp_path, limits=ContainerLimits(), grader_args=[], gpus=True)
    docker = run_command(["docker"], "img", **common)
    podman = run_command(["podman", "--runtime", "runc"], "img", **common)
    assert values(docker, "--gpus") == ["all"]
    assert values(podman, "--device") == ["nvidia.com/gpu=all"]
    assert podman[:4] == ["podman", "--runtime", "runc", "run"]
    assert "target=/submission.zip,readonly" in values(docker, "--mount")[0]
    assert docker[docker.index("img") + 1 :][:2] == ["run", "/submission.zip"]


# ---------------------------------------------------------------- finding an engine


def _fake_binary(folder: Path, name: str, info_exit: int) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\nexit {info_exit}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_find_engine_takes_the_first_engine_that_answers(tmp_path, monkeypatch):
    monkeypatch.delenv("GRADER_CONTAINER_ENGINE", raising=False)
    _fake_binary(tmp_path, "docker", 1)  # a client without a daemon
    _fake_binary(tmp_path, "podman", 0)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_engine() == ["podman"]
    (tmp_path / "podman").unlink()
    with pytest.raises(ContainerError, match="daemon running"):
        find_engine()
    (tmp_path / "docker").unlink()
    with pytest.raises(ContainerError, match="install docker or podman"):
        find_engine()


def test_find_engine_honours_a_named_engine(tmp_path, monkeypatch):
    _fake_binary(tmp_path, "podman", 0)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("GRADER_CONTAINER_ENGINE", "podman --runtime runc")
    assert find_engine() == ["podman", "--runtime", "runc"]
    with pytest.raises(ContainerError, match="not installed"):
        find_engine("nerdctl")


# ---------------------------------------------------------------- whole batches


def _student(root: Path, name: str, mode: str | None = None, base: str = "starter") -> None:
    folder = materialize(base, root / name)
    if mode:
        (folder / "FAKE_MODE").write_text(mode)


def test_batch_grades_every_submission_in_its_own_container(tmp_path, engine, demo_setup):
    submissions = tmp_path / "submissions"
    _student(submissions, "starter")
    _student(submissions, "oom", "oom")
    _student(submissions, "oom-later", "oom-after-labA", base="solution")
    _student(submissions, "broken", "broken")
    archive = materialize("solution", tmp_path / "solution-src")  # submitted as a zip
    with zipfile.ZipFile(submissions / "solution.zip", "w") as bundle:
        for path in archive.rglob("*"):
            bundle.write(path, path.relative_to(archive))
    out = tmp_path / "graded"
    runner = ContainerRunner("course:test", engine, ContainerLimits(memory="2g", wall_clock_s=120))
    entries = sorted((path.name.removesuffix(".zip"), path) for path in submissions.iterdir())
    rows = {row.student: row for row in grade_all(entries, out, demo_setup, jobs=2, runner=runner, show_progress=False)}

    assert set(rows) == {"solution", "starter", "oom", "oom-later", "broken"}
    assert rows["solution"].score == DEMO_CPU_MAX and rows["solution"].pending == 3
    assert set(rows["solution"].statuses.values()) == {"graded"}
    assert rows["starter"].score == 0 and set(rows["starter"].statuses.values()) == {"graded"}
    oom = summary(out / "oom")
    assert oom.total["score"] == 0 and {lab.status for lab in oom.labs} == {"crashed"}
    assert "out of memory (limit 2g)" in oom.labs[0].reason
    later = summary(out / "oom-later")  # the lab finished before the kill keeps its points
    assert (later.lab("labA").score, later.lab("labA").status) == (16, "graded")  # 10 + 6 held-out
    assert (later.lab("labB").score, later.lab("labB").status) == (0, "crashed")
    assert any("out of memory" in flag for flag in later.flags)
    broken = summary(out / "broken")
    assert {lab.status for lab in broken.labs} == {"grader-error"}
    assert "exited with code 1" in broken.labs[0].reason and "crashed before grading" in broken.labs[0].reason
    assert (out / "broken" / CONTAINER_LOG).is_file()
    assert json.loads((out / BATCH_FILE).read_text())["rows"][0]["student"] == "broken"

    runs = [call for call in engine_calls(tmp_path) if call[0] == "run"]
    assert len(runs) == 5 and all(values(call, "--network") == ["none"] for call in runs)
    removed = {call[-1] for call in engine_calls(tmp_path) if call[0] == "rm"}
    assert removed == {values(call, "--name")[0] for call in runs}, "every container is removed"


def test_a_container_past_its_wall_clock_limit_is_killed_and_gets_a_row(tmp_path, engine, demo_setup):
    submission = tmp_path / "hangs"
    _student(tmp_path, "hangs", "hang")
    runner = ContainerRunner("course:test", engine, ContainerLimits(wall_clock_s=2))
    result = runner(submission, tmp_path / "out", demo_setup, "hangs")
    assert result.total["score"] == 0
    assert {lab.status for lab in result.labs} == {"timeout"}
    assert "wall-clock limit (2 s)" in result.labs[0].reason
    assert summary(tmp_path / "out").total == result.total
    killed = [call for call in engine_calls(tmp_path) if call[0] == "kill"]
    assert len(killed) == 1


def test_batch_command_line_runs_containers(tmp_path, engine, capsys):
    submissions = tmp_path / "submissions"
    _student(submissions, "solution", base="solution")
    code = grader_main(
        [
            "batch",
            str(submissions),
            "--out",
            str(tmp_path / "graded"),
            "--course",
            str(DEMO_COURSE),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--container",
            "course:test",
            "--engine",
            " ".join(engine),
            "--memory",
            "1g",
            "--cpus",
            "1",
            "--wall-timeout",
            "120",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "network off, memory 1g, 1 CPUs" in printed
    assert f"solution: {DEMO_CPU_MAX}/" in printed
    (run,) = [call for call in engine_calls(tmp_path) if call[0] == "run"]
    assert values(run, "--memory") == ["1g"]
    assert run[run.index("course:test") + 1 :][-12:] == [
        "--labs",
        "labA,labB",
        "--gpu",
        "auto",
        "--time-factor",
        "10",
        "--min-test-timeout",
        "10",
        "--wall-factor",
        "5",
        "--max-consecutive-timeouts",
        "25",
    ]
    assert "--read-only" in run and values(run, "--tmpfs")[0].startswith("/tmp:"), "a read-only root, a private /tmp"
    assert values(run, "--security-opt")[-1] in ("unmask=ALL", "systempaths=unconfined"), (
        "the grader inside may isolate each graded process with bubblewrap"
    )


def test_batch_without_an_engine_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("GRADER_CONTAINER_ENGINE", raising=False)
    submissions = tmp_path / "submissions"
    starter_copy(submissions / "starter")
    code = grader_main(
        [
            "batch",
            str(submissions),
            "--out",
            str(tmp_path / "graded"),
            "--course",
            str(DEMO_COURSE),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--container",
            "course:test",
        ]
    )
    assert code == 2
    assert "no container engine" in capsys.readouterr().err
