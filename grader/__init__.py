"""The course autograder: ``python -m grader VERB`` (the verbs: :data:`grader.__main__.VERBS`).

One subpackage per stage of the path a submission takes, each importing only the ones below it::

    verbs/      the command line: one thin module per verb, parsing options and calling down
    release/    the student distribution and the Gradescope bundle, built and verified
    report/     the class report: every student's summary folded into CSV, JSON and one HTML page
    runners/    one submission (local), many (batch), in containers, on Slurm, inside Gradescope
    scoring/    a pure function from (rubric, saved evidence) to a result, and its renderings
    execute/    one lab run: the sandbox, its isolation, its limits, the supervisor, the pytest probe
    course/     the course's facts: its labs, their pristine files, the rubric, reference times
    evidence/   what a graded run leaves on disk (file layout, event log) and reading it back

A submission goes ``verbs.run`` -> ``runners.local.grade_submission`` -> ``execute.sandbox`` (the
pristine course plus the student's editable files) -> ``execute.supervisor.run_lab`` (one isolated
pytest process per lab part, under ``execute.isolation``) -> ``evidence`` (the supervisor's records)
-> ``scoring.score.rescore`` -> ``scoring.feedback`` (``summary.json``, ``feedback.md``,
``results.json``); ``report`` reads many such folders.

The top level holds only the entry point (``__main__``) and the tools run as ``python -m grader.X``:
:mod:`grader.warm` (collect the rubric ahead of time), :mod:`grader.benchmark`, :mod:`grader.gpu_check`, and
:mod:`grader.synthetic` (made-up classes for the benchmark, the report's browser check and the tests).
"""
