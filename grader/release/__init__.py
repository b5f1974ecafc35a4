"""Distributions built from the course: the student release, and the Gradescope bundle.

- :mod:`~grader.release.build`: the student release (no solutions, no held-out tests, no instructor
  sections), verified end to end;
- :mod:`~grader.release.student_docs`: instructor-only sections, reference mentions, documented commands;
- :mod:`~grader.release.gradescope_bundle`: the autograder zip an instructor uploads to Gradescope.

Imports: :mod:`grader.runners` (a release is verified by grading its starters), and everything below.
"""
