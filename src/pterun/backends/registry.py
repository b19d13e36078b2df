"""Backends by the id the exporter wrote into the program ("XnnpackBackend", ...)."""

from __future__ import annotations

from collections.abc import Callable

from pterun.backends.interface import BackendInterface
from pterun.core.lazy import LazyTable
from pterun.errors import InvalidArgument, NotFound


class BackendRegistry:
    """Maps backend ids to backends. Built-ins are registered by factory and imported on first use."""

    def __init__(self) -> None:
        self._table: LazyTable[str, BackendInterface] = LazyTable()

    def register(self, name: str, backend: BackendInterface | Callable[[], BackendInterface]) -> None:
        """Registers a backend (or a factory that makes it) under ``name``; a name can be registered once."""
        with self._table.lock:
            if name in self._table:
                raise InvalidArgument(f"a backend named {name!r} is already registered")
            if isinstance(backend, BackendInterface):
                self._table.add(name, backend)
            else:
                self._table.add_factory(name, backend)

    def get(self, name: str) -> BackendInterface:
        backend = self._table.get(name)
        if backend is None:
            raise NotFound(f"backend {name!r} is not registered; registered: {', '.join(self.names) or 'none'}")
        return backend

    def is_available(self, name: str) -> bool:
        try:
            return bool(self.get(name).is_available())
        except NotFound:
            return False
        except ImportError:
            return False

    @property
    def names(self) -> list[str]:
        return sorted(self._table.keys())
