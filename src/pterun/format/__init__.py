"""The .pte / .ptd file formats, read into plain objects. Knows nothing of torch or devices."""

from pterun.format.data_file import DataFile, TensorLayout
from pterun.format.plan import (
    INSTRUCTION_EVENTS,
    DelegateCall,
    DelegateSpec,
    Dynamism,
    FreeCall,
    JumpFalseCall,
    KernelCall,
    Kind,
    ListValue,
    MoveCall,
    Plan,
    Scalar,
    TensorSpec,
    Value,
)
from pterun.format.program import ProgramFile, Verification

__all__ = [
    "DataFile", "DelegateCall", "DelegateSpec", "Dynamism", "FreeCall", "INSTRUCTION_EVENTS", "JumpFalseCall",
    "Kind", "KernelCall", "ListValue", "MoveCall", "Plan", "ProgramFile", "Scalar", "TensorLayout", "TensorSpec",
    "Value", "Verification",
]
