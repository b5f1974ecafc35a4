"""Submissions graded side by side share the machine's cores (``batch -j N``, selfcheck, Slurm tasks).

Two graded pytest processes that each size PyTorch's pool by every core make it spin against itself:
lab 1's MobileNetV2 held-out test took 0.3 s alone and 60 s beside a second one on 2 cores, and the
reference solution lost those points to its time limits in a fresh CI run.
"""

from __future__ import annotations

import os

import pytest

import grader.execute.supervisor
from grader.execute.command import pytest_env
from grader.runners.batch import grade_all, share_cores
from grader.tests.corpus import materialize


@pytest.fixture
def no_thread_setting(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5, 6, 7})


def test_graded_processes_of_a_parallel_batch_split_the_cores(tmp_path, demo_setup, no_thread_setting, monkeypatch):
    """Through the real runner: every pytest process of ``-j 4`` on 8 cores gets 2 threads."""
    seen: list[dict[str, str]] = []
    supervise = grader.execute.supervisor.supervise

    def recording_supervise(command, *, env, **kwargs):
        seen.append(env)
        return supervise(command, env=env, **kwargs)

    monkeypatch.setattr(grader.execute.supervisor, "supervise", recording_supervise)
    submissions = [(name, materialize("solution", tmp_path / "in" / name)) for name in ("ann", "bob")]
    rows = grade_all(submissions, tmp_path / "out", demo_setup, jobs=4, show_progress=False)
    assert all(row.score + row.pending == row.max_score for row in rows), "the solution still earns every CPU point"
    assert seen and {(env["OMP_NUM_THREADS"], env["TORCHINDUCTOR_COMPILE_THREADS"]) for env in seen} == {("2", "2")}


def test_one_submission_at_a_time_keeps_pytorchs_default(demo_setup, no_thread_setting):
    assert share_cores(demo_setup, 1).options.threads is None
    assert "OMP_NUM_THREADS" not in pytest_env(
        demo_setup.course.root, "auto", share_cores(demo_setup, 1).options.threads
    )


def test_more_jobs_than_cores_still_get_one_thread_each(demo_setup, no_thread_setting):
    assert share_cores(demo_setup, 3).options.threads == 2
    assert share_cores(demo_setup, 16).options.threads == 1


def test_an_explicit_thread_count_is_left_alone(demo_setup, no_thread_setting, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert share_cores(demo_setup, 4).options.threads is None
    assert pytest_env(demo_setup.course.root, "auto", None)["OMP_NUM_THREADS"] == "3"
