"""Lab 2's given code: read it, import it, do not edit it (the grader uses its own copy).

Your files are the ones at the lab's top level that ``lab.toml`` lists as ``editable`` (the handout's
first table). Everything here is what they build on, and what the tests and commands use:

- the machine: ``isa`` (with ``isa.json`` and its schema) and ``ir`` (the program format);
- what your files import: ``graphs`` and ``support_tools`` (support tables and argument checks),
  ``partition_tools``, ``program_builder`` (the lowering's bookkeeping), ``mutation`` (in-place writes),
  ``coverage``, ``divergence``, ``flops`` and ``profiling_tools`` (step 6);
- ``registration``: the ``npu_simulator`` entry point ``torch.compile`` finds;
- what the tests run on: ``models``, ``llama_tiny``, ``zoo``, and ``checks`` (what ``test_lab.py`` checks);
- the commands: ``python -m lab02_npu_backend.given.report`` (with ``--draw``, the pictures of the
  partitions ``partition_drawing`` makes) and ``python -m lab02_npu_backend.given.benchmark``.
"""
