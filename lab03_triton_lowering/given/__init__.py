"""Lab 3's given code: read it, import it, do not edit it (the grader uses its own copy).

Your files are the ones at the lab's top level that ``lab.toml`` lists as ``editable`` (the handout's
first table). Everything here is what they build on, and what the tests and commands use:

- ``interface``: what the kernel, the operators and the lowering agree on, and the lowering's handle;
- ``round_trips``: half-precision round trips in Inductor's graphs, and matching with or without them;
- what the tests run on: ``models``, ``simulated_gpu`` (the GPU half checked without a GPU), and
  ``checks`` (what ``test_lab.py`` checks);
- the commands: ``python -m lab03_triton_lowering.given.simulated_gpu`` (the GPU half, with or without a GPU)
  and ``python -m lab03_triton_lowering.given.benchmark`` (needs a CUDA GPU).
"""
