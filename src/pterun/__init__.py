"""pterun: a Python-native runtime for ExecuTorch programs.

    from pterun import Runtime
    program = Runtime.get().load_program("model.pte")
    outputs = program.load_method("forward").execute([x])
"""

from pterun.errors import ErrorCode, PteError
from pterun.executor import Method, MethodMeta, Program, TensorInfo
from pterun.format import Verification
from pterun.runtime import Runtime
from pterun.version import VERSION

__version__ = VERSION

__all__ = ["ErrorCode", "Method", "MethodMeta", "Program", "PteError", "Runtime", "TensorInfo", "Verification"]
