"""The course autograder: ``python -m grader run|score|batch|report|release|selfcheck``.

Layout (one module per verb, the machinery beside them):

- verbs: :mod:`grader.run`, :mod:`grader.score`, :mod:`grader.batch`, :mod:`grader.report`,
  :mod:`grader.release`, :mod:`grader.selfcheck`, :mod:`grader.gradescope_bundle`;
- other runners and hosts: :mod:`grader.container` (one container per submission),
  :mod:`grader.gradescope_run` (inside Gradescope);
- the course and its rubric: :mod:`grader.course`, :mod:`grader.rubric`;
- before grading: :mod:`grader.preflight` (the grading interpreter and the output folder);
- isolation and execution: :mod:`grader.sandbox`, :mod:`grader.runner`, :mod:`grader.pytest_probe`;
- data and rendering: :mod:`grader.artifacts`, :mod:`grader.results`, :mod:`grader.feedback`,
  :mod:`grader.limits`, :mod:`grader.report_html` (the class page);
- the student release's documents: :mod:`grader.student_docs`;
- instructor tools: :mod:`grader.report_check` (the class page in headless Chromium), :mod:`grader.benchmark`.
"""
