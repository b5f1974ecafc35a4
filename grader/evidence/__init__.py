"""What a graded run leaves on disk, and reading it back as plain data.

- :mod:`~grader.evidence.layout`: the graded folder's files (``summary.json``, ``raw/<lab>/...``);
- :mod:`~grader.evidence.events`: the event log's vocabulary (what the supervisor records per test),
  reading it, and the rules read from it (canaries, the timeout streak);
- :mod:`~grader.evidence.runs`: one lab's raw run as a :class:`~grader.evidence.runs.LabRun`;
- :mod:`~grader.evidence.text`: keeping what graded code prints from swamping the grader.

Imports: the standard library only. Everything above reads or writes these formats.
"""
