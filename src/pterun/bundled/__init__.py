"""Bundled programs (.bpte): a program with test cases for its methods, run on pterun (docs/bundled.md)."""

from pterun.bundled.compare import OutputCheck
from pterun.bundled.program import DEFAULT_ATOL, DEFAULT_RTOL, BundledProgram, CaseResult

__all__ = ["DEFAULT_ATOL", "DEFAULT_RTOL", "BundledProgram", "CaseResult", "OutputCheck"]
