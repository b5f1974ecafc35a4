"""The course's facts: which labs exist, their pristine files, what each test is worth, how long it takes.

- :mod:`~grader.course.labs`: discovering the labs of a course root, the pristine files a sandbox
  copies, the reference solution as a submission;
- :mod:`~grader.course.rubric`: the rubric's types (every graded test, its points, GPU need,
  visibility, area) and its file form; collecting it is :mod:`grader.execute.collect`'s job;
- :mod:`~grader.course.reference_times`: the reference solution's recorded time on every test.

Imports: ``labkit`` and :mod:`grader.evidence` (the one layer below it: the file formats).
"""
