"""A method's delegates: initialized at load, in the plan's order, and destroyed with the method."""

from __future__ import annotations

import dataclasses
import functools

from pterun.backends import BackendInitContext, CompileSpec
from pterun.errors import NotFound, PteError
from pterun.executor.context import LoadContext
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

    def functions(self, plan: Plan) -> list[tuple[str, functools.partial]]:
        """(backend id, execute function) per delegate, as steps.build_steps takes them."""
        return [(d.backend_id, functools.partial(backend.execute, handle))
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


def _init(context: LoadContext, plan: Plan, d) -> tuple:
    where = f"method {plan.name!r} delegate {d.backend_id!r}"
    backends = context.registries.backends
    try:
        backend = backends.get(d.backend_id)
    except NotFound as exc:  # not registered
        raise NotFound(f"method {plan.name!r}: {exc.message}") from None
    if not backend.is_available():
        raise NotFound(f"{where}: backend {d.backend_id!r} is not available on this machine")
    init = BackendInitContext(
        method_name=plan.name,
        named_data=context.data.named_data,
        runtime_specs=context.backend_options.get(d.backend_id, {}),
        device=context.run_device.torch,
        load_program=context.load_nested,
        compile_code=context.cache.code if context.cache is not None else None,
    )
    specs = tuple(CompileSpec(k, v) for k, v in d.compile_specs)
    try:
        return backend, backend.init(init, context.data.delegate_blob(d.inline, d.index), specs)
    except PteError as exc:
        raise type(exc)(f"{where}: {exc.message}") from None
