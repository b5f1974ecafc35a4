"""The class report: every student's ``summary.json`` folded into ``class.csv``, ``class.json``, ``class.html``.

- :mod:`~grader.report.summary`: the class summary (per lab, per student, per test, talking points);
- :mod:`~grader.report.html`: the self-contained page, and each flagged pair's side-by-side page;
- :mod:`~grader.report.similarity`: similar submissions (copydetect's winnowing over the editable files
  each graded folder kept, the starter and the class's common code set aside);
- :mod:`~grader.report.gradebook`: the roster and the gradebook Canvas imports (and Moodle's);
- :mod:`~grader.report.browser_check`: the page of a made-up class (:mod:`grader.synthetic`) looked at
  in headless Chromium (an instructor tool, not in the student release).

Imports: :mod:`grader.scoring`, :mod:`grader.evidence`, :mod:`grader.course` (the starter files), and
copydetect; the browser check also :mod:`grader.execute` (it collects the real course's rubric to
score a demo class) and :mod:`grader.synthetic`.
"""
