"""Runners: grading one submission, or a class of them, wherever the grading happens.

A runner is ``(submission, out, setup, student) -> SubmissionResult`` and never raises: every
student gets a row. :func:`grader.runners.local.grade_submission` is the one that builds the sandbox
and runs the labs; the others host it somewhere else and re-score what it left:

- :mod:`~grader.runners.local`: one submission on this machine (options, setup, the labs, scoring);
- :mod:`~grader.runners.batch`: many submissions on one machine, ``-j N`` at a time;
- :mod:`~grader.runners.container`: each submission in its own container of the course image;
- :mod:`~grader.runners.slurm` (+ :mod:`~grader.runners.slurm_states`): job arrays on a Slurm cluster;
- :mod:`~grader.runners.gradescope`: inside Gradescope's autograder container.

Imports: :mod:`grader.scoring`, :mod:`grader.execute`, :mod:`grader.course`, :mod:`grader.evidence`.
"""
