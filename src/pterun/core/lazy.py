"""A table of things registered by key, each given as itself or as a factory called on first use.

Backends and allocators are registered this way so that registering the
built-ins imports nothing heavy and touches no device; the first lookup makes
the thing, once, under the table's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LazyTable(Generic[K, V]):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._made: dict[K, V] = {}
        self._factories: dict[K, Callable[[], V]] = {}

    def __contains__(self, key: K) -> bool:
        return key in self._made or key in self._factories

    def keys(self) -> set[K]:
        return set(self._made) | set(self._factories)

    def made(self, key: K) -> V | None:
        """What is registered under ``key`` if it has been made (or given as itself), else None."""
        return self._made.get(key)

    def add(self, key: K, value: V) -> None:
        """Under ``lock``, after the caller has refused a key already taken."""
        self._made[key] = value

    def add_factory(self, key: K, factory: Callable[[], V]) -> None:
        """Under ``lock``, after the caller has refused a key already taken."""
        self._factories[key] = factory

    def get(self, key: K) -> V | None:
        """What is registered under ``key``, made now if it was given as a factory; None if nothing is."""
        with self.lock:
            value = self._made.get(key)
            if value is None:
                factory = self._factories.pop(key, None)
                if factory is None:
                    return None
                value = self._made[key] = factory()
            return value
