"""Synthetic classes: made-up students for the instructor's tools and the grader's tests.

- :mod:`~grader.synthetic.classes`: the one generator. A roll of named students, each with a skill
  drawn from one seeded random stream, and what a student's folder holds in each kind of class: raw
  artifacts on a made-up rubric (the benchmark, the report's browser check), a whole submission of the
  demo course (graded for real by ``batch`` or Slurm), the similarity lab's module;
- :mod:`~grader.synthetic.algorithms`: the similarity lab's material (nine contracts, four honest
  implementations of each) and the source rewrites honest students and a copier apply;
- ``python -m grader.synthetic OUT -n 60``: a class of the demo course (:mod:`grader.synthetic.__main__`).

Instructor-only, like its users (:mod:`grader.benchmark`, :mod:`grader.report.browser_check`,
``grader/tests``): the demo course it copies lives with the grader's tests, which the student release
leaves out.

Imports: :mod:`grader.course` (the rubric's types), :mod:`grader.evidence` (the raw files' names) and the
demo course's corpus (:mod:`grader.tests.corpus`).
"""
