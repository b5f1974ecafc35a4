"""The command line: one thin module per verb of ``python -m grader`` (the table: :data:`grader.__main__.VERBS`).

Each module exposes ``add_arguments(parser)`` and ``main(args) -> exit status`` and calls down into the
stage that does the work; :mod:`~grader.verbs.options` holds the options the grading verbs share and
turns them into a :class:`~grader.runners.local.GradingSetup`.

Imports: anything below; nothing imports the verbs but ``grader.__main__``.
"""
