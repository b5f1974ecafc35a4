"""The class report: every student's ``summary.json`` folded into ``class.csv``, ``class.json``, ``class.html``.

- :mod:`~grader.report.summary`: the class summary (per lab, per student, per test, talking points);
- :mod:`~grader.report.html`: the self-contained page;
- :mod:`~grader.report.demo_class` and :mod:`~grader.report.browser_check`: a made-up class and the
  page looked at in headless Chromium (instructor tools, not in the student release).

Imports: :mod:`grader.scoring`, :mod:`grader.evidence` (the browser check also grades a demo class).
"""
