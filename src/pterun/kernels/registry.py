"""Kernels by operator name, and how to call them.

A program names operators as ``namespace::name.overload`` ("aten::add.out")
and passes each call its arguments as a list of values: the schema's
arguments in order, then one value for the result. A kernel turns that list
into a call once, at load: a :class:`Binding` says which positions go where,
so the executor can emit a direct call with no per-call argument shuffling.

Kernels are registered by full name and, optionally, for one device type; a
kernel for the device at hand wins over one for any device. Names the
registry does not hold are offered to its providers (the ATen binder), which
can make a kernel for any operator torch knows.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pterun.core.device import DeviceType
from pterun.errors import InvalidProgram, OperatorMissing


@dataclass(frozen=True)
class Functional:
    """A kernel's call as a pure function, which ``torch.compile`` can trace (``executor/codegen/functional.py``).

    ``fn`` takes the binding's arguments except ``outputs`` (in the same positions and keywords) and
    returns the values those arguments would be written with, in order: one value, or a sequence when
    there are several. ``options`` names keywords ``fn`` also takes that describe the first output
    ("dtype", "device", "memory_format"): a factory's out-variant learns its dtype from ``out``, its
    functional form from a keyword. With no ``outputs``, ``fn`` is a traceable form of the kernel,
    called as the kernel is. ``together``, where set, computes several calls that share their first argument
    and take constants for their second in one call: ``together(first, [second, ...])`` returns their values
    in order (a decoder layer's query, key and value products of one normalized row, read in one launch).
    """

    fn: Callable
    outputs: tuple[int, ...] = ()
    options: tuple[str, ...] = ()
    together: Callable | None = None


@dataclass(frozen=True)
class Binding:
    """How to call a kernel with an instruction's argument list, and what the call does to it.

    ``fn(*[args[i] for i in positional], **{k: args[i] for k, i in keywords})``;
    its return value becomes ``args[result]`` when ``result`` is set. Values
    at the positions in ``convert`` pass through the given function once, at
    load (ExecuTorch encodes dtypes and memory formats as ints).

    The rest is the kernel's whole effect on the call's values, and the
    executor relies on it (``executor/load/steps.py`` describes every step from
    it): to refuse a program that would write a constant (the file's bytes),
    to turn copies into views, to decide what a CUDA graph can hold and what
    ``torch.compile`` can trace. A kernel must declare every argument it writes:

    * ``writes``: ``out`` tensors (or lists of them) that torch resizes to the
      result's shape; the executor empties the dynamic ones before the call,
      which is how torch expects an out tensor of a new shape to arrive;
    * ``mutates``: other arguments written in place, left as they are (an
      in-place update, or an ``out`` the kernel resizes itself);
    * ``covers``: those of ``mutates`` the kernel writes whole (every element
      of the sizes it gives them, as a copy does; an in-place update of part
      of a tensor does not), so memory planned over them holds nothing older;
    * ``aliases``: arguments the result may share memory with (a view's input).

    A binding with no ``result``, ``writes`` or ``mutates`` is taken to write
    every argument: a kernel that really did nothing would not be called.

    ``accepts`` gives, per argument, the value kinds it takes (named as the
    format names them, in lower case: "tensor", "int_list", "null"; None or a
    missing entry: any), and ``returns`` those of the value the result is
    assigned to. The executor refuses at load a call that passes anything else.

    What the executor may do around the call:

    * ``syncs``: the kernel reads tensor values on the host (``.item()``, a
      result whose shape depends on the data), so no CUDA graph can hold it;
    * ``strided``: it reads its tensor arguments at any strides, so a copy
      that only feeds such kernels can become a view;
    * ``view``: the kernel copies this view of its arguments into its one
      written argument (a ``<view>_copy``), so it can be that view instead;
    * ``functional``: its pure form (None: ``torch.compile`` cannot trace it);
    * ``sizes_outs``: it sizes its ``writes`` itself and leaves them contiguous (pterun's fused kernels), so the
      executor neither empties the dynamic ones before the call nor restores their strides after it.
    """

    fn: Callable
    positional: tuple[int, ...] = ()
    keywords: tuple[tuple[str, int], ...] = ()
    result: int | None = None
    convert: tuple[tuple[int, Callable], ...] = ()
    writes: tuple[int, ...] = ()
    mutates: tuple[int, ...] = ()
    aliases: tuple[int, ...] = ()
    accepts: tuple[frozenset[str] | None, ...] = ()
    returns: frozenset[str] | None = None
    syncs: bool = False
    strided: bool = False
    view: Callable | None = None
    functional: Functional | None = None
    covers: tuple[int, ...] = ()
    sizes_outs: bool = False


KernelFactory = Callable[[int], Binding]
"""Makes the binding for a call with the given number of arguments (result included)."""

Provider = Callable[[str], "KernelFactory | None"]


def exact_count(binding: Binding, nargs: int, name: str, *, also: tuple[int, ...] = ()) -> KernelFactory:
    """A factory for calls of exactly ``nargs`` values (the result's slot included; ``also``: other
    counts emitters are known to pass), every one bound by ``binding``."""

    def factory(count: int) -> Binding:
        if count != nargs and count not in also:
            raise InvalidProgram(f"{name} takes {nargs - 1} arguments and a result; the call passes {count} values")
        return binding

    return factory


def fixed_arity(fn: Callable, nargs: int, name: str, *, result: bool = True, keywords: dict[int, str] | None = None,
                **effects) -> KernelFactory:
    """A factory for a Python kernel that takes exactly ``nargs`` values (result included), the last one
    its result when ``result``; ``effects`` are the :class:`Binding`'s other fields."""
    keywords = keywords or {}
    last = nargs - 1
    positional = tuple(i for i in range(last) if i not in keywords)
    named = tuple((k, i) for i, k in keywords.items())
    binding = Binding(fn, positional, named, last if result else None, **effects)
    return exact_count(binding, nargs, name)


@dataclass
class KernelRegistry:
    """Operator name -> kernel factory. A kernel registered for every device (``device_type`` None) or for the device
    in question wins over pterun's own for one device (``builtin``: a faster kernel where the device allows, such as
    small float arithmetic in native code on the CPU), which win over what providers make (ATen's operators)."""

    _kernels: dict[tuple[str, DeviceType | None], KernelFactory] = field(default_factory=dict)
    _builtin: dict[tuple[str, DeviceType], KernelFactory] = field(default_factory=dict)
    _providers: list[tuple[Provider, Callable[[], Iterable[str]]]] = field(default_factory=list)
    _provided: dict[str, KernelFactory] = field(default_factory=dict)  # what providers made, kept
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def register(self, name: str, factory: KernelFactory, device_type: DeviceType | None = None, *,
                 builtin: bool = False) -> None:
        """``builtin``: pterun's own kernel for ``device_type``, which any other registration of ``name`` overrides."""
        with self._lock:
            if builtin:
                assert device_type is not None, "a built-in kernel is one device's"
                self._builtin[(name, device_type)] = factory
            else:
                self._kernels[(name, device_type)] = factory

    def unregister(self, name: str, device_type: DeviceType | None = None) -> None:
        """Forgets the kernel ``register(name, ..., device_type)`` registered, else the built-in one of that device
        (KeyError when there is none)."""
        with self._lock:
            if (name, device_type) in self._kernels or device_type is None:
                del self._kernels[(name, device_type)]
            else:
                del self._builtin[(name, device_type)]

    def add_provider(self, provider: Provider, names: Callable[[], Iterable[str]]) -> None:
        """``provider(name)`` makes a factory for names it knows; ``names()`` lists them."""
        self._providers.append((provider, names))

    def lookup(self, name: str, device_type: DeviceType = DeviceType.CPU) -> KernelFactory:
        factory = (self._kernels.get((name, device_type)) or self._kernels.get((name, None))
                   or self._builtin.get((name, device_type)) or self._provided.get(name))
        if factory is not None:
            return factory
        for provider, _ in self._providers:
            factory = provider(name)
            if factory is not None:
                with self._lock:
                    self._provided[name] = factory
                return factory
        raise OperatorMissing(self._missing_message(name))

    def holds(self, name: str, device_type: DeviceType) -> bool:
        """Whether ``name`` is registered for ``device_type`` or any device (providers not asked)."""
        return (name, device_type) in self._kernels or (name, None) in self._kernels or \
            (name, device_type) in self._builtin

    def __contains__(self, name: str) -> bool:
        try:
            self.lookup(name)
        except OperatorMissing:
            return False
        return True

    @property
    def registered_names(self) -> set[str]:
        """The names registered explicitly, without those providers offer (every ATen operator)."""
        # Copies: another thread may register kernels.
        return {name for name, _ in list(self._kernels)} | {name for name, _ in list(self._builtin)}

    @property
    def names(self) -> set[str]:
        names = self.registered_names
        for _, listing in self._providers:
            names.update(listing())
        return names

    def _missing_message(self, name: str) -> str:
        close = difflib.get_close_matches(name, sorted(self.names), n=3, cutoff=0.75)
        hint = f"; closest registered: {', '.join(close)}" if close else ""
        return f"no kernel is registered for operator {name}{hint}"
