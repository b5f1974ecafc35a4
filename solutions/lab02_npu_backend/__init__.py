"""Lab 02: the ``npu_simulator`` torch.compile backend.

The public API (identical in the starter and in ``solutions.lab02_npu_backend``):

- :mod:`.support`: ``TORCH_SUPPORT``, ``ATEN_SUPPORT``, ``NpuOperatorSupport``, ``support_for_dialect``
  (can the NPU run this node?)
- :mod:`.partition`: ``partition_for_npu``, ``NpuPartitioning`` (group NPU nodes into partitions)
- :mod:`.lowering`: ``lower_to_program``, ``LoweringError`` (FX partition -> NPU program)
- :mod:`.simulator`: ``NpuSimulator`` (validate and run NPU programs)
- :mod:`.backend`: ``npu_backend``, ``npu_aot_backend``, ``compile_graph``, ``register_backend``,
  ``partition_report``, ``BACKEND_NAME`` (the backend itself)
- :mod:`.profiling` (optional step 6): ``ProfiledProgram``, ``instruction_traffic``, ``instruction_flops``,
  ``op_rows`` (profiling mode)
- :mod:`.folding` (optional step 7): ``fold_shape_constants``, ``foldable_nodes`` (what depends only on
  shapes and constants, computed once at compile time)

The harness (ISA, program format, coverage report, models, CLI, benchmark) lives in the other
modules of this package; you do not edit those.
"""

from .backend import BACKEND_NAME, compile_graph, npu_aot_backend, npu_backend, partition_report, register_backend
from .folding import fold_shape_constants, foldable_nodes
from .lowering import LoweringError, lower_to_program
from .partition import NpuPartitioning, partition_for_npu
from .profiling import ProfiledProgram, instruction_flops, instruction_traffic, op_rows
from .simulator import NpuSimulator
from .support import ATEN_SUPPORT, TORCH_SUPPORT, NpuOperatorSupport, support_for_dialect

__all__ = [
    "ATEN_SUPPORT",
    "BACKEND_NAME",
    "LoweringError",
    "NpuOperatorSupport",
    "NpuPartitioning",
    "NpuSimulator",
    "ProfiledProgram",
    "TORCH_SUPPORT",
    "compile_graph",
    "fold_shape_constants",
    "foldable_nodes",
    "instruction_flops",
    "instruction_traffic",
    "lower_to_program",
    "npu_aot_backend",
    "npu_backend",
    "op_rows",
    "partition_for_npu",
    "partition_report",
    "register_backend",
    "support_for_dialect",
]
