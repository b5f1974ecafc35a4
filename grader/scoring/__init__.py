"""Scoring: a pure function from (rubric, saved evidence) to a result, and what people read of it.

- :mod:`~grader.scoring.results`: the result's dataclasses (``summary.json``), statuses, exit codes;
- :mod:`~grader.scoring.score`: the rules, test by test and lab by lab; ``rescore`` of a graded folder;
- :mod:`~grader.scoring.feedback`: Markdown feedback, JSON, Gradescope's ``results.json``.
- :mod:`~grader.scoring.reference_recording`: the reference's times on every test, from its graded folder.

Imports: :mod:`grader.course`, :mod:`grader.evidence`. Nothing here starts a process.
"""
