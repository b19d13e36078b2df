"""Backends by the id the exporter wrote into the program ("XnnpackBackend", ...)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from pterun.backends.interface import BackendInterface
from pterun.errors import InvalidArgument, NotFound


class BackendRegistry:
    """Maps backend ids to backends. Built-ins are registered by factory and imported on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._backends: dict[str, BackendInterface] = {}
        self._factories: dict[str, Callable[[], BackendInterface]] = {}

    def register(self, name: str, backend: BackendInterface | Callable[[], BackendInterface]) -> None:
        """Registers a backend (or a factory that makes it) under ``name``; a name can be registered once."""
        with self._lock:
            if name in self._backends or name in self._factories:
                raise InvalidArgument(f"a backend named {name!r} is already registered")
            if isinstance(backend, BackendInterface):
                self._backends[name] = backend
            else:
                self._factories[name] = backend

    def get(self, name: str) -> BackendInterface:
        with self._lock:
            backend = self._backends.get(name)
            if backend is None:
                factory = self._factories.pop(name, None)
                if factory is None:
                    raise NotFound(
                        f"backend {name!r} is not registered; registered: {', '.join(sorted(self.names)) or 'none'}"
                    )
                backend = self._backends[name] = factory()
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
        return sorted(set(self._backends) | set(self._factories))
