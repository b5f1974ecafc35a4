"""Lab 1's given code: read it, import it, do not edit it (the grader uses its own copy).

Your files are the ones at the lab's top level that ``lab.toml`` lists as ``editable`` (the handout's
first table). Everything here is what they build on, and what the tests and commands use:

- what your passes import: ``graph_tools`` (dialect-neutral FX helpers), ``interface`` (the operators each
  pass matches, its reasons, and the base class your pass class subclasses), ``fused_ops``,
  ``onednn_ops`` (step 10), ``algebra_ops`` (step 11), ``pass_report`` and ``pass_changes`` (what the
  pass manager reports);
- what the tests run on: ``models``, ``resnet_eval``, ``capture`` (one model in every dialect),
  ``wrong_folds`` (folds wrong on purpose), and ``checks`` (what ``test_lab.py`` counts and asserts);
- ``backend`` (the ``torch.compile`` backend built on your pipeline);
- the commands: ``python -m lab01_fx_passes.given.benchmark`` and ``python -m lab01_fx_passes.given.draw_graphs``.
"""
