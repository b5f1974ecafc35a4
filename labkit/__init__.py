"""Shared course machinery: one place for what every lab, benchmark and the grader need.

- :mod:`labkit.impl`: pick the student's package or the reference solution (``--impl``).
- :mod:`labkit.labspec`: each lab's ``lab.toml`` (editable files, handout steps and their tests,
  talking points and their evidence).
- :mod:`labkit.numerics`: how far apart two outputs are (max abs / rel error over pytrees).
- :mod:`labkit.bench`: interleaved timing with its spread, verdicts the noise cannot flip, progress,
  readable tables, JSON and plots for benchmark scripts.
- :mod:`labkit.pytest_plugin`: the ``points`` and ``gpu`` markers, the ``--impl`` and ``--step`` options,
  the ``lab`` fixture, and the points-per-step summary that ends a lab's run (:mod:`labkit.step_summary`).
- :mod:`labkit.graph_drawing`: pictures of FX graphs (PyTorch's ``FxGraphDrawer``, nodes marked with
  what happened to them, DOT text always, SVG and PNG through Graphviz).
- :mod:`labkit.run_lab`: what ``nox -s labNN`` runs: pytest, resumed after a test that crashes the
  process, from the run's event log (:mod:`labkit.event_log`).
- :mod:`labkit.triton_env`: one Triton kernel launched compiled on CUDA and interpreted on CPU, each CPU
  launch fenced by guard bands (:mod:`labkit.guard_bands`: a read outside a tensor is NaN, a write raises).
- :mod:`labkit.spellings`: an FX graph's calls respelled (keywords, positional, shortest) with the same
  meaning, so a pass is checked on every way its arguments can be written.
"""
