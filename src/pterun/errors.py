"""Error codes and typed exceptions.

Every failure pterun reports is a :class:`PteError` carrying one of ExecuTorch's
``runtime/core/error.h`` codes, so a message from pterun and one from ExecuTorch
can be matched by number. There is one subclass per code, named as ExecuTorch
names the code (``OperatorMissing``, ``NotFound``, ...), except 0x11, whose name
would shadow Python's ``NotImplemented``: it is :class:`Unimplemented`.

``PteError`` derives from ``RuntimeError`` because ExecuTorch's Python bindings
raise ``RuntimeError`` for every runtime failure, and code written against them
catches that.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    Ok = 0x00
    Internal = 0x01
    InvalidState = 0x02
    EndOfMethod = 0x03
    AlreadyLoaded = 0x04
    NotSupported = 0x10
    NotImplemented = 0x11
    InvalidArgument = 0x12
    InvalidType = 0x13
    OperatorMissing = 0x14
    RegistrationExceedingMaxKernels = 0x15
    RegistrationAlreadyRegistered = 0x16
    NotFound = 0x20
    MemoryAllocationFailed = 0x21
    AccessFailed = 0x22
    InvalidProgram = 0x23
    InvalidExternalData = 0x24
    OutOfResources = 0x25
    DelegateInvalidCompatibility = 0x30
    DelegateMemoryAllocationFailed = 0x31
    DelegateInvalidHandle = 0x32


class PteError(RuntimeError):
    """A runtime failure with an ExecuTorch error code."""

    code: ErrorCode = ErrorCode.Internal

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.message} [{self.code.name} 0x{int(self.code):02x}]"


class Internal(PteError):
    code = ErrorCode.Internal


class InvalidState(PteError):
    code = ErrorCode.InvalidState


class AlreadyLoaded(PteError):
    code = ErrorCode.AlreadyLoaded


class NotSupported(PteError):
    code = ErrorCode.NotSupported


class NativeCodeNotTrusted(NotSupported):
    """A delegate would load native code from the file (a shared library), and the caller did not say it
    trusts such code (``load_program(..., trust_native_code=True)``; docs/trust.md)."""


class Unimplemented(PteError):
    code = ErrorCode.NotImplemented


class InvalidArgument(PteError):
    code = ErrorCode.InvalidArgument


class IndexOutOfRange(InvalidArgument, IndexError):
    """An index past the end of a list the caller can see (MethodMeta, methods)."""


class InvalidArgumentType(InvalidArgument, TypeError):
    """An argument of a Python type the call does not take (a tensor or a dict where a list of inputs
    goes), where ExecuTorch's bindings raise ``TypeError``."""


class InvalidType(PteError):
    code = ErrorCode.InvalidType


class OperatorMissing(PteError):
    code = ErrorCode.OperatorMissing


class RegistrationAlreadyRegistered(PteError):
    code = ErrorCode.RegistrationAlreadyRegistered


class NotFound(PteError):
    code = ErrorCode.NotFound


class MemoryAllocationFailed(PteError):
    code = ErrorCode.MemoryAllocationFailed


class AccessFailed(PteError):
    code = ErrorCode.AccessFailed


class InvalidProgram(PteError):
    code = ErrorCode.InvalidProgram


class InvalidExternalData(PteError):
    code = ErrorCode.InvalidExternalData


class OutOfResources(PteError):
    code = ErrorCode.OutOfResources


class DelegateInvalidCompatibility(PteError):
    code = ErrorCode.DelegateInvalidCompatibility


class DelegateMemoryAllocationFailed(PteError):
    code = ErrorCode.DelegateMemoryAllocationFailed


class DelegateInvalidHandle(PteError):
    code = ErrorCode.DelegateInvalidHandle
