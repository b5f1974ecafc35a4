"""The grader's tests. The demo course and the submission corpus under ``fixtures/`` are graded by
the grader in subprocesses; pytest must never collect them as the grader's own tests."""

collect_ignore_glob = ["fixtures/*"]
