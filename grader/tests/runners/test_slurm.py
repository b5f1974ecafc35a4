"""Grading on Slurm: the pure parts without a cluster, then the real thing against a running cluster.

The cluster tests need a Slurm cluster answering on this machine (the repository's single-node test
cluster: ``slurm/cluster.sh install && slurm/cluster.sh start``, as root; ``.ci/run`` starts it).
Without one they skip, saying so. They submit two classes at once and follow them:

- the whole fixture corpus, which must get the same rows as ``grader batch`` gave it;
- a submission that hangs past Slurm's time limit (``TIMEOUT``), one that allocates more memory than
  its task has and a correct one. The hog is the kernel's first choice when the task runs out of memory
  (``oom_score_adj``), so the grader goes on: only the tests that allocated lose their points, with a
  reason naming memory, and the task succeeds. ``resubmit --failed`` must rerun only the hung task
  (and a task cancelled by hand must say ``CANCELLED``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from grader.__main__ import main
from grader.runners.local import grade_submission
from grader.runners.slurm import (
    CPU,
    GPU,
    PLAN_DIR,
    Plan,
    Resources,
    Task,
    TaskStatus,
    lab_groups,
    record_failures,
    slurm_parameters,
    task_minutes,
    task_record_path,
    time_minutes,
)
from grader.runners.slurm_states import parse_job_records, parse_sacct
from grader.scoring.results import SubmissionResult
from grader.scoring.score import GRADER_ERROR_FILE
from grader.tests.conftest import DEMO_LIMITS
from grader.tests.corpus import DEMO_COURSE, corpus_names, expected, materialize

# ---------------------------------------------------------------- without a cluster


def test_sacct_and_squeue_lines_give_each_tasks_state():
    lines = "12_0|COMPLETED\n12_1|CANCELLED by 0\n12_[2-4%2]|PENDING\n13|TIMEOUT\n"
    assert parse_sacct(lines) == {
        "12_0": "COMPLETED",
        "12_1": "CANCELLED",
        "12_2": "PENDING",
        "12_3": "PENDING",
        "12_4": "PENDING",
        "13": "TIMEOUT",
    }


def test_scontrol_and_job_completion_lines_give_each_tasks_state():
    lines = (
        "JobId=14 ArrayJobId=12 ArrayTaskId=1 JobName=grade-cpu JobState=OUT_OF_MEMORY Reason=None\n"
        "JobId=12 ArrayJobId=12 ArrayTaskId=2-3%1 JobState=PENDING\n"
        "JobId=30 UserId=root(0) Name=grade-cpu JobState=TIMEOUT Partition=debug\n"
        "JobId=99 ArrayJobId=98 ArrayTaskId=0 JobState=COMPLETED\n"
    )
    assert parse_job_records(lines, ["12", "30"]) == {
        "12_1": "OUT_OF_MEMORY",
        "12_2": "PENDING",
        "12_3": "PENDING",
        "30": "TIMEOUT",
    }


def test_tasks_sacct_has_not_recorded_yet_are_still_queued(monkeypatch):
    """Accounting can lag behind a fresh array: squeue's pending and running tasks count beside sacct's."""
    import grader.runners.slurm_states as slurm_states

    answers = {"sacct": "12_0|COMPLETED\n", "squeue": "12_1|RUNNING\n12_[2-3]|PENDING\n"}
    monkeypatch.setattr(slurm_states, "_run", lambda command: answers.get(command[0]))
    assert slurm_states.task_states(["12"]) == {
        "12_0": "COMPLETED",
        "12_1": "RUNNING",
        "12_2": "PENDING",
        "12_3": "PENDING",
    }


@pytest.mark.parametrize("text, minutes", [("00:01:00", 1), ("1:30:01", 91), ("45", 45), ("2:30", 3), ("1-02", 1560)])
def test_slurm_time_formats(text, minutes):
    assert time_minutes(text) == minutes


def test_a_malformed_time_is_refused():
    with pytest.raises(ValueError, match="HH:MM:SS"):
        time_minutes("ten minutes")


def _plan(demo_setup, **resources) -> Plan:
    groups = lab_groups(demo_setup.rubric, "auto", resources.get("gpus_per_task", 1))
    return Plan(
        str(DEMO_COURSE),
        ["labA", "labB"],
        "auto",
        vars(DEMO_LIMITS),
        "python",
        Resources(**resources),
        groups,
        {"alice": "/nowhere"},
    )


def test_labs_with_gpu_tests_go_to_the_gpu_array_and_only_it_holds_a_gpu(demo_setup):
    rubric = demo_setup.rubric
    assert lab_groups(rubric, "auto", 1) == {CPU: ["labA"], GPU: ["labB"]}
    assert lab_groups(rubric, "auto", 0) == {CPU: ["labA", "labB"]}, "--gpus-per-task 0: GPU tests pending"
    assert lab_groups(rubric, "off", 1) == {CPU: ["labA", "labB"]}
    plan = _plan(demo_setup, partition="short", gpu_partition="gpu", gpus_per_task=2, max_parallel=8, mem="2G")
    cpu, gpu = slurm_parameters(plan, rubric, CPU, 100), slurm_parameters(plan, rubric, GPU, 100)
    assert "gres" not in cpu and cpu["partition"] == "short" and cpu["array_parallelism"] == 8 and cpu["mem"] == "2G"
    assert gpu["gres"] == "gpu:2" and gpu["partition"] == "gpu"


def test_a_task_sizes_pytorchs_threads_by_its_cpus_not_the_nodes(demo_setup, tmp_path):
    plan = _plan(demo_setup, cpus_per_task=3)
    (tmp_path / PLAN_DIR).mkdir()
    demo_setup.rubric.write(tmp_path / PLAN_DIR / "rubric.json")
    assert plan.grading_setup(tmp_path).options.threads == 3


def test_a_tasks_default_time_is_its_labs_budgets_plus_a_margin(demo_setup):
    from grader.execute.limits import whole_lab_s

    plan = _plan(demo_setup)
    budget = whole_lab_s(demo_setup.rubric.labs[0], DEMO_LIMITS)  # its visible and its held-out part
    assert task_minutes(plan, demo_setup.rubric, CPU) == -(-int(budget + 600) // 60)
    assert task_minutes(_plan(demo_setup, time="00:01:00"), demo_setup.rubric, CPU) == 1


def test_a_killed_task_leaves_a_row_with_slurms_reason_and_the_other_labs_points(demo_setup, tmp_path):
    """The CPU task graded lab A; the GPU task was killed at its time limit before lab B finished."""
    graded = tmp_path / "graded"
    plan = _plan(demo_setup, time="00:01:00")
    plan.tasks = {
        key: Task("alice", group, job=job, attempt=1)
        for key, group, job in (("cpu/alice", CPU, "7_0"), ("gpu/alice", GPU, "8_0"))
    }
    (graded / PLAN_DIR).mkdir(parents=True)
    demo_setup.rubric.write(graded / PLAN_DIR / "rubric.json")
    plan.save(graded)
    grade_submission(
        materialize("solution", tmp_path / "alice"), graded / "alice", demo_setup, name="alice", only_labs=["labA"]
    )
    statuses = [
        TaskStatus("cpu/alice", "alice", CPU, "7_0", "done", "COMPLETED"),
        TaskStatus("gpu/alice", "alice", GPU, "8_0", "failed", "TIMEOUT"),
    ]
    assert record_failures(graded, plan, statuses) == ["alice"]
    result = SubmissionResult.from_dict(json.loads((graded / "alice" / "summary.json").read_text()))
    assert (result.lab("labA").status, result.lab("labA").score) == ("graded", 16)
    lab_b = result.lab("labB")
    assert lab_b.status == "timeout" and lab_b.score == 0
    assert "Slurm TIMEOUT (task 8_0)" in lab_b.reason and "--time 00:01:00" in lab_b.reason
    assert result.flags == ("Slurm TIMEOUT: task 8_0 (gpu labs)",)


def test_a_task_whose_grading_failed_on_the_grader_side_is_failed_with_the_graders_reason(
    demo_setup, tmp_path, monkeypatch
):
    """A grader bug on the node used to leave the task 'done': status said so and resubmit skipped it."""
    import grader.runners.local
    import grader.runners.slurm as slurm_runner

    graded = tmp_path / "graded"
    plan = _plan(demo_setup)
    plan.students = {"alice": str(materialize("solution", tmp_path / "alice"))}
    plan.tasks = {"cpu/alice": Task("alice", CPU, job="7_0", attempt=1)}
    (graded / PLAN_DIR).mkdir(parents=True)
    demo_setup.rubric.write(graded / PLAN_DIR / "rubric.json")
    plan.save(graded)

    def broken(*args, **kwargs):
        raise RuntimeError("the grader's own bug")

    monkeypatch.setattr(grader.runners.local, "_run_labs", broken)
    monkeypatch.setattr(slurm_runner, "this_job_id", lambda: "7_0")
    monkeypatch.setattr(slurm_runner, "task_states", lambda jobs: {"7_0": "COMPLETED"})
    monkeypatch.setattr(Plan, "grading_setup", lambda self, graded: demo_setup)
    slurm_runner.grade_task(str(graded), "cpu/alice")
    [status] = slurm_runner.task_statuses(graded, plan)
    assert status.state == "failed", "resubmit --failed must grade this student again"
    assert record_failures(graded, plan, [status]) == ["alice"]
    lab_a = SubmissionResult.from_dict(json.loads((graded / "alice" / "summary.json").read_text())).lab("labA")
    assert lab_a.status == "grader-error" and "the grader failed on the node" in lab_a.reason
    assert "RuntimeError" in lab_a.reason and "the grader's own bug" not in lab_a.reason, "students read the reason"
    assert "the grader's own bug" in (graded / "alice" / GRADER_ERROR_FILE).read_text(), "the instructor's file"


def test_only_a_sigkill_the_grader_did_not_send_is_blamed_on_memory():
    from grader.runners.slurm import killed_by_the_kernel

    assert killed_by_the_kernel({"exit_code": -9})
    assert not killed_by_the_kernel({"exit_code": -9, "killed_tests": ["labA/test_lab.py::test_add"]})
    assert not killed_by_the_kernel({"exit_code": -9, "timed_out": True})
    assert not killed_by_the_kernel({"exit_code": 1})


# ---------------------------------------------------------------- against a real cluster


def cluster_problem() -> str | None:
    """Why the cluster tests cannot run here (None when a Slurm cluster answers with a usable node)."""
    how = "start the repository's test cluster with `slurm/cluster.sh install && slurm/cluster.sh start` (as root)"
    if shutil.which("sbatch") is None:
        return f"no Slurm cluster: sbatch is not installed; {how}"
    try:
        done = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"no Slurm cluster: sinfo failed ({error}); {how}"
    if done.returncode != 0:
        return f"no Slurm cluster: sinfo failed ({done.stderr.strip()}); {how}"
    if not any(state.rstrip("*").startswith(("idle", "mixed", "alloc")) for state in done.stdout.split()):
        return f"no Slurm node takes jobs (sinfo says {done.stdout.split()}); {how}"
    return None


needs_cluster = pytest.mark.skipif(cluster_problem() is not None, reason=str(cluster_problem()))
#: The demo limits of the batch-graded corpus, as command-line options.
DEMO_TIME_ARGS = [
    "--time-factor",
    str(DEMO_LIMITS.time_factor),
    "--min-test-timeout",
    str(DEMO_LIMITS.min_test_timeout_s),
    "--max-consecutive-timeouts",
    str(DEMO_LIMITS.max_consecutive_timeouts),
]
HOG = '    hog = b"x" * (1500 * 2**20)  # 1.5 GB, every page written\n'


def _failing_class(folder: Path) -> Path:
    materialize("solution", folder / "fine")
    materialize("lab_timeout", folder / "hangs")  # hangs at import; its lab budget is set above --time
    text = materialize("solution", folder / "hog") / "labB_text" / "text.py"
    source = text.read_text()
    body = source.index("return len(text.split())")
    text.write_text(source[:body] + HOG.lstrip() + "    " + source[body:])
    return folder


@pytest.fixture(scope="module")
def submitted(corpus_dir, rubric_cache, tmp_path_factory) -> dict[str, Path]:
    """Both classes, submitted at once (they share the cluster's CPUs); nothing waited for yet."""
    if cluster_problem():
        pytest.skip(cluster_problem())
    root = tmp_path_factory.mktemp("slurm")
    course = ["--course", str(DEMO_COURSE), "--cache-dir", str(rubric_cache), "--cpus-per-task", "1"]
    out = {"corpus": root / "corpus", "failing": root / "failing"}
    assert (
        main(["slurm", "submit", str(corpus_dir), "--out", str(out["corpus"]), "--mem", "1G", *course, *DEMO_TIME_ARGS])
        == 0
    )
    assert (
        main(
            [
                "slurm",
                "submit",
                str(_failing_class(root / "failing-subs")),
                "--out",
                str(out["failing"]),
                "--mem",
                "300M",
                "--time",
                "00:01:00",
                "--lab-timeout",
                "600",
                *course,
                *DEMO_TIME_ARGS,
            ]
        )
        == 0
    )
    return out


def _summary(folder: Path) -> SubmissionResult:
    return SubmissionResult.from_dict(json.loads((folder / "summary.json").read_text()))


def _row(result: SubmissionResult) -> dict:
    """A student's row: totals, each lab's score, status and pending points, the flags. (Not each test's
    outcome: under load a failing Hypothesis test may shrink past its limit in one run and not in the
    other: "timeout" or "failed", 0 points either way.)"""
    return {
        "total": result.total,
        "flags": result.flags,
        "labs": {lab.lab: (lab.score, lab.status, lab.pending) for lab in result.labs},
    }


@needs_cluster
def test_the_corpus_graded_on_slurm_gets_the_rows_of_batch(submitted, graded_corpus, tmp_path, capsys):
    graded = submitted["corpus"]
    assert main(["slurm", "status", str(graded), "--wait"]) == 0, capsys.readouterr().out
    assert f"{2 * len(corpus_names())} done · 0 running · 0 pending · 0 failed" in capsys.readouterr().out
    for name in corpus_names():
        on_slurm, in_batch = _row(_summary(graded / name)), _row(_summary(graded_corpus / name))
        # "drawn": its status, or the tests its flags name, follow the supervisor's canary draw; its points do not
        if expected(name).get("drawn"):
            on_slurm, in_batch = on_slurm["total"], in_batch["total"]
        assert on_slurm == in_batch, name
    plan = Plan.load(graded)
    for key, task in plan.tasks.items():  # lab B (a GPU test) held a GPU, lab A never did
        record = json.loads(task_record_path(graded, key).read_text())
        assert (record["gpus"] != "") == (task.group == GPU), (key, record)
    assert main(["report", str(graded), "--out", str(tmp_path / "report")]) == 0
    rows = (tmp_path / "report" / "class.csv").read_text().splitlines()[1:]
    assert sorted(row.split(",")[0] for row in rows) == corpus_names(), "one row per student, none for .slurm"


@needs_cluster
def test_tasks_slurm_kills_leave_rows_that_say_why_and_resubmit_reruns_only_them(submitted, capsys):
    graded = submitted["failing"]
    assert main(["slurm", "status", str(graded), "--wait"]) == 1
    printed = capsys.readouterr().out
    assert "5 done · 0 running · 0 pending · 1 failed" in printed
    assert "FAILED hangs (cpu labs" in printed and "TIMEOUT" in printed and "FAILED hog" not in printed

    hangs, hog, fine = (_summary(graded / name) for name in ("hangs", "hog", "fine"))
    assert hangs.lab("labA").status == "timeout" and "Slurm TIMEOUT" in hangs.lab("labA").reason
    assert hangs.lab("labB").status == "graded" and hangs.lab("labB").score > 0, "the other task's lab keeps its points"
    hogged = {test.name: test for test in hog.lab("labB").tests}["test_count_words"]
    assert hog.lab("labB").status == "graded" and hogged.outcome == "crashed"
    assert "memory" in hogged.message and "a Slurm job's --mem" in hogged.message, hogged.message
    assert hog.lab("labB").score > 0 and hog.lab("labA").score == 16, (
        "the tests that did not allocate keep their points"
    )
    assert {lab.status for lab in fine.labs} == {"graded"} and not fine.flags

    before = {key: (task.job, task.attempt) for key, task in Plan.load(graded).tasks.items()}
    assert main(["slurm", "resubmit", str(graded), "--failed", "--mem", "4G"]) == 0
    after = {key: (task.job, task.attempt) for key, task in Plan.load(graded).tasks.items()}
    rerun = {key for key in after if after[key] != before[key]}
    assert rerun == {"cpu/hangs"} and all(after[key][1] == 2 for key in rerun)
    subprocess.run(["scancel", after["cpu/hangs"][0]], check=True)  # it would only hang again
    main(["slurm", "status", str(graded), "--wait"])
    hangs = _summary(graded / "hangs")
    assert hangs.lab("labA").status == "grader-error" and "CANCELLED" in hangs.lab("labA").reason
