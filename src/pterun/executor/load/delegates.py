"""A method's delegates: checked before the method allocates anything, initialized at load in the plan's
order, and destroyed with the method."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from pterun.backends import BackendInitContext, BackendInterface, CompileSpec
from pterun.errors import NativeCodeNotTrusted, NotFound, PteError
from pterun.executor.context import LoadContext
from pterun.executor.load.steps import FunctionalDelegate
from pterun.format import DelegateCall, Plan


class Delegates:
    """The initialized ``(backend, handle)`` pairs of a method's delegates, in the plan's order."""

    def __init__(self, context: LoadContext, plan: Plan) -> None:
        self.handles: list[tuple] = []
        try:
            for d in plan.delegates:
                self.handles.append(_init(context, plan, d))
        except BaseException:
            self.destroy()
            raise

    def functions(self, plan: Plan) -> list[tuple[str, Callable[[list], None], FunctionalDelegate | str]]:
        """(backend id, execute function, what compile=True calls it by) per delegate, as steps.build_steps takes
        them; the last, where its backend keeps a method calling it uncompiled, the reason."""
        return [(d.backend_id, backend.executor(handle), _functional(backend, handle))
                for d, (backend, handle) in zip(plan.delegates, self.handles)]

    def profiled(self, plan: Plan, steps: list, trace) -> list:
        """``steps`` with each delegate call running its backend's profiled execute, where the backend has one
        (``BackendInterface.profiled``); the call then reports the delegate's nodes to ``trace``."""
        steps = list(steps)
        for n, ins in enumerate(plan.instructions):
            if isinstance(ins, DelegateCall):
                backend, handle = self.handles[ins.delegate_index]
                fn = backend.profiled(handle, trace.delegate_tracer(n))
                if fn is not None:
                    steps[n] = dataclasses.replace(steps[n], fn=fn)
        return steps

    def destroy(self) -> None:
        handles, self.handles = self.handles, []
        for backend, handle in handles:
            try:
                backend.destroy(handle)
            except Exception:  # noqa: BLE001 - destroy must not mask the error being raised
                pass


def _functional(backend: BackendInterface, handle) -> FunctionalDelegate | str:
    reason = backend.uncompiled_reason(handle)
    if reason is not None:
        return reason
    return FunctionalDelegate(functools.partial(backend.output_sizes, handle),
                              functools.partial(backend.traced_execute, handle))


def check_delegates(context: LoadContext, plan: Plan) -> None:
    """Every delegate's backend is registered, trusted when it loads native code, given a blob it accepts
    (``BackendInterface.validate``) and available here; the first step of a method's load, so a refusal
    comes before any memory is allocated and is the same on every machine."""
    for n, d in enumerate(plan.delegates):
        backend = _backend(context, plan, d)
        where = f"method {plan.name!r} delegate {d.backend_id!r}"
        if backend.native_code and not context.options.trust_native_code:
            raise NativeCodeNotTrusted(
                f"{where} (delegate {n}) is native code (a shared library in the program) that would run with "
                "this process's rights; it is loaded only when the caller trusts it: "
                "load_program(..., trust_native_code=True), or pterun run --trust-native-code"
            )
        try:
            backend.validate(_init_context(context, plan, d), context.data.delegate_blob(d.inline, d.index),
                             _specs(d))
        except PteError as exc:
            raise type(exc)(f"{where}: {exc.message}") from None
        if not backend.is_available():
            raise NotFound(f"{where}: backend {d.backend_id!r} is not available on this machine")


def _backend(context: LoadContext, plan: Plan, d):
    try:
        return context.registries.backends.get(d.backend_id)
    except NotFound as exc:  # not registered
        raise NotFound(f"method {plan.name!r}: {exc.message}") from None


def _init_context(context: LoadContext, plan: Plan, d) -> BackendInitContext:
    return BackendInitContext(
        method_name=plan.name,
        named_data=context.data.named_data,
        runtime_specs=context.options.backend_options.get(d.backend_id, {}),
        device=context.run_device.torch,
        load_program=context.load_nested,
        compile_code=context.options.cache.code if context.options.cache is not None else None,
        marks=context.options.cache,
        release=context.data.release,
    )


def _specs(d) -> tuple[CompileSpec, ...]:
    return tuple(CompileSpec(k, v) for k, v in d.compile_specs)


def _init(context: LoadContext, plan: Plan, d) -> tuple:
    where = f"method {plan.name!r} delegate {d.backend_id!r}"
    backend = _backend(context, plan, d)
    if not backend.is_available():
        raise NotFound(f"{where}: backend {d.backend_id!r} is not available on this machine")
    try:
        return backend, backend.init(_init_context(context, plan, d), context.data.delegate_blob(d.inline, d.index),
                                     _specs(d))
    except PteError as exc:
        raise type(exc)(f"{where}: {exc.message}") from None
