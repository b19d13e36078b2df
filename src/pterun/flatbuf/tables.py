"""Reading generated tables: a union's member as its own class, where a vector's bytes lie."""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def union_member(table, cls: type[T]) -> T:
    """The union member ``table`` (what a generated union accessor returns) read as ``cls``."""
    member: Any = cls()  # a generated table class: it has Init
    member.Init(table.Bytes, table.Pos)
    return member


def vector_span(table, voffset: int = 4) -> tuple[int, int]:
    """(start, length) of the vector field at ``voffset`` of a generated table, in its buffer; (0, 0) when
    the vector is absent or empty."""
    tab = table._tab
    field = tab.Offset(voffset)
    length = tab.VectorLen(field) if field else 0
    return (tab.Vector(field) if length else 0), length
