"""Shared course machinery: one place for what every lab, benchmark and the grader need.

- :mod:`labkit.impl`: pick the student's package or the reference solution (``--impl``).
- :mod:`labkit.labspec`: each lab's ``lab.toml`` (editable files, talking points and their evidence).
- :mod:`labkit.numerics`: how far apart two outputs are (max abs / rel error over pytrees).
- :mod:`labkit.bench`: interleaved timing, readable tables, JSON and plots for benchmark scripts.
- :mod:`labkit.pytest_plugin`: the ``points`` and ``gpu`` markers, the ``--impl`` option, the ``lab`` fixture.
"""
