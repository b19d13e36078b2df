"""Method: loaded once (loader.py), then each call binds inputs, runs one generated function, returns outputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from pterun.errors import InvalidArgument, InvalidState, NotFound
from pterun.executor.call.guard import CallGuard
from pterun.executor.call.inputs import input_sequence
from pterun.executor.call.outputs import collect, prepare
from pterun.executor.call.threads import Threads
from pterun.executor.codegen.failures import as_pte_error
from pterun.executor.context import LoadContext
from pterun.executor.load.values import shared_lock
from pterun.executor.loader import load_method
from pterun.executor.meta import MethodMeta
from pterun.format import Plan, TensorSpec

_InferenceMode = torch._C._InferenceMode  # torch.inference_mode's guard, without its Python wrapper


class Method:
    """A loaded method of a program."""

    def __init__(self, context: LoadContext, plan: Plan) -> None:
        # Loading packs weights with PyTorch's parallel operators: on the cores other processes leave free, as a
        # call runs. A thread on a core another process holds made each such operator wait milliseconds for it
        # (an XNNPACK MobileNetV2's load, 2 cores, the other one busy: twice its idle time). The count the
        # method's calls run on is chosen after, from the loading thread's own.
        loading = Threads(context.options.num_threads, "loading")
        saved = loading.enter()
        try:
            loaded = load_method(context, plan)
        finally:
            loading.exit(saved)
        self.name = plan.name
        self._plan = plan
        self._meta = MethodMeta(plan)
        self._where = f"method {plan.name!r}"
        self._loaded = loaded
        self._allocators = context.registries.allocators
        self._run = loaded.run
        self._graph = loaded.graph
        self._binders = loaded.binders
        self._args: list = [None] * loaded.arguments
        self._input_set = [False] * len(plan.inputs)
        self._slots = loaded.outputs
        self._slot_of = loaded.slot_of
        self._outputs: tuple | None = None
        # Every output a tensor the method's memory holds, or a constant: the caller gets them, or copies.
        self._plain_outputs = not loaded.outputs and loaded.graph is None and all(
            isinstance(plan.values[vi], TensorSpec) for vi in plan.outputs)
        self._owned = loaded.owned
        self._precision = loaded.precision
        self._threads = Threads.choose(context.options.num_threads, plan, loaded.steps,
                                       compiled=loaded.compiled_function is not None)
        self._calls = CallGuard(self._where, shared_lock(context, plan))
        self.written_inputs = loaded.written_inputs  # inputs the method updates in place
        self._trace = loaded.trace

    # -- inputs ------------------------------------------------------------------

    def set_inputs(self, inputs: Sequence, *, copy_inputs: bool = False) -> None:
        """Sets every input (a step of a call; see :meth:`execute` and docs/threads.md)."""
        if type(inputs) is not list and type(inputs) is not tuple:
            inputs = input_sequence(inputs, f"{self._where}: set_inputs", one_tensor=False)
        with self._calls.locked("set inputs"):
            self._calls.claim("set inputs")
            self._bind_inputs(inputs, copy_inputs)

    def _bind_inputs(self, inputs: Sequence, copy_inputs: bool) -> None:
        binders = self._binders
        if len(inputs) != len(binders):
            raise InvalidArgument(f"{self._where}: takes {len(binders)} inputs, got {len(inputs)}")
        args, i = self._args, 0
        try:
            for i, bind in enumerate(binders):
                bind(inputs[i], copy_inputs, args)
        except BaseException:
            self._input_set[:i] = [True] * i  # those before it are bound
            self._input_set[i] = False  # half bound, or refused: it must be set again
            raise
        if False in self._input_set:
            self._input_set[:] = [True] * len(binders)

    def set_input(self, value, index: int, *, copy_inputs: bool = False) -> None:
        with self._calls.locked("set an input"):
            self._calls.claim("set an input")
            if not 0 <= index < len(self._binders):
                raise InvalidArgument(
                    f"{self._where}: input {index} does not exist; it has {len(self._binders)} inputs"
                )
            self._input_set[index] = False
            self._binders[index](value, copy_inputs, self._args)
            self._input_set[index] = True

    # -- outputs -----------------------------------------------------------------

    def set_output(self, index: int, tensor: torch.Tensor) -> None:
        """Makes ``tensor`` the memory of unplanned output ``index`` (ExecuTorch's set_output_data_ptr).

        The method writes that output there, resizing it within its upper bound, until another
        tensor is set. Planned outputs have memory already: setting one is ``InvalidState``.
        """
        with self._calls.locked("set an output"):
            self._calls.check_free("set an output")
            slot = self._slot_of.get(index)
            if slot is None:
                if not 0 <= index < len(self._plan.outputs):
                    raise InvalidArgument(f"{self._where}: output {index} does not exist")
                raise InvalidState(
                    f"{self._where}: output {index} is memory-planned or not a tensor; it needs no memory")
            slot.check(tensor)
            slot.use(tensor, self._args, caller=True)

    def get_outputs(self, clone_outputs: bool = True) -> list:
        """The outputs of this thread's last run (copies unless ``clone_outputs=False``)."""
        with self._calls.locked("get its outputs"):
            if self._outputs is not None:
                self._calls.check_owner()
            return self._collect_outputs(clone_outputs)

    def _collect_outputs(self, clone_outputs: bool) -> list:
        outputs = self._outputs
        if self._plain_outputs and outputs is not None:
            return [o.clone() for o in outputs] if clone_outputs else list(outputs)
        # A captured graph writes the same buffers on every replay: the caller gets copies of unplanned ones.
        replaying = self._graph is not None and self._graph.replaying
        return collect(self._outputs, clone_outputs, self._slots, self._owned if replaying else frozenset(),
                       self._where)

    # -- execute -----------------------------------------------------------------

    def run(self) -> None:
        """Executes the method with the inputs set; outputs are read with :meth:`get_outputs`."""
        with self._calls.locked("run"):
            self._calls.check_free("run")
            self._calls.stepper = None
            with _InferenceMode(True):
                self._execute_plan()

    def execute(self, inputs: Sequence = (), *, clone_outputs: bool = True, copy_inputs: bool = False) -> list:
        """Sets the inputs, runs, and returns the outputs (copies unless ``clone_outputs=False``).

        ``inputs`` is a list (any sequence) of values, or one tensor for a method of one input. The
        whole call holds the method's lock, so threads sharing a method take turns (docs/threads.md).
        """
        if type(inputs) is not list and type(inputs) is not tuple:
            inputs = input_sequence(inputs, f"{self._where}: execute", one_tensor=True)
        calls = self._calls
        with calls.locked("execute"):
            if calls.stepper is not None:
                calls.check_free("execute")
                calls.stepper = None
            # Copying inputs into planned memory costs less under inference mode (no autograd bookkeeping);
            # outputs are cloned outside it, so the caller's are ordinary tensors.
            with _InferenceMode(True):
                self._bind_inputs(inputs, copy_inputs)
                self._execute_plan()
            return self._collect_outputs(clone_outputs)

    __call__ = execute

    def _execute_plan(self) -> None:
        """Runs the method; the caller holds the lock and inference mode."""
        if False in self._input_set:
            raise InvalidArgument(f"{self._where}: input {self._input_set.index(False)} has not been set")
        if self._slots:
            prepare(self._slots, self._allocators, self._args)
        graph = self._graph
        calls = self._calls
        calls.start()
        try:
            # The usual call of a CUDA method: its graph replayed, which runs no operator on the CPU (no threads
            # to set) and none of the method's Python. Its host path is tests/executor/test_host_path.py's.
            replayed = graph.replay(self._args) if graph is not None else None
            if replayed is not None:
                self._outputs = replayed
            else:
                threads = self._threads.enter()
                try:
                    if graph is None:
                        precision = self._precision
                        pinned = precision.enter()
                        try:
                            self._outputs = self._run(*self._args)
                        finally:
                            precision.exit(pinned)
                    else:
                        self._outputs = graph.run_or_capture(self._args, self._precision)
                finally:
                    self._threads.exit(threads)
        except Exception as exc:  # noqa: BLE001 - mapped to a PteError naming the instruction
            self._outputs = None
            raise as_pte_error(exc, self._loaded.generated, self._loaded.steps, self._where) from exc
        finally:
            calls.busy = False
        if self._trace is not None:
            self._trace.check()  # a debug buffer too small for this run's values

    # -- introspection -----------------------------------------------------------

    @property
    def compile_status(self) -> str:
        """With ``compile=True``: ``"compiled"``, or ``"not compiled: <why>"`` (it then runs as plain Python)."""
        compiled = self._loaded.compiled_function
        return compiled.status if compiled is not None else self._loaded.compile_status

    @property
    def num_threads(self) -> int:
        """The intra-op threads a call from this thread runs on when no other call is running
        (docs/threads.md); ``num_threads_reason`` says how the count was chosen."""
        return self._threads.planned()

    @property
    def num_threads_reason(self) -> str:
        return self._threads.reason

    @property
    def metadata(self) -> MethodMeta:
        return self._meta

    def method_meta(self) -> MethodMeta:
        return self._meta

    @property
    def source(self) -> str:
        """The Python the method was generated as (its own code)."""
        return self._loaded.generated.source

    @property
    def code(self) -> Callable:
        """The function ``source`` defines, which each call runs; its ``__code__.co_filename`` is the file name
        of this load's lines in tracebacks and ``linecache``."""
        return self._loaded.generated.run

    @property
    def replays(self) -> dict[int, int]:
        """The runs of steps the generated code makes again as one native call where it can (``_replay<n>`` in
        ``source``; executor/codegen/replay.py), by the instruction each starts at: how many calls it made so."""
        return {n: replay.replayed for n, replay in self._loaded.generated.replays.items()}

    @property
    def steps(self) -> tuple:
        """What the method runs, instruction by instruction, after folding and fusion (executor/steps.py): a
        KernelStep (the operator, its Binding, the values it passes), a DelegateStep, the plan's move, jump
        or free; None where an instruction became nothing (a copy folded into a view)."""
        return tuple(self._loaded.steps)

    @property
    def functional_source(self) -> str | None:
        """With ``compile=True``: the pure function ``torch.compile`` traces (None when there is none)."""
        return self._loaded.functional_source

    @property
    def plan(self) -> Plan:
        """The method as the file describes it: values, instructions, operators, delegates."""
        return self._plan

    def value(self, index: int):
        """Value ``index`` as loaded: a planned tensor (a view of its arena), a constant, a scalar or a list;
        None for a tensor the caller binds on each call."""
        return self._loaded.objects[index]

    @property
    def functional(self):
        """With ``compile=True``: the pure function ``torch.compile`` traces, uncompiled (None when the
        method has none). It takes the method's tensor inputs and returns its outputs."""
        compiled = self._loaded.compiled_function
        return compiled.functional if compiled is not None else None

    @property
    def delegate_handles(self) -> list:
        """What each delegate's backend returned from ``init``, in the plan's order."""
        return [handle for _, handle in self._loaded.delegates.handles]

    @property
    def cuda_graph(self):
        """The runner that captures and replays the method as one CUDA graph (graphs.py); None when the
        method runs kernel by kernel."""
        return self._graph

    def get_attribute(self, name: str) -> torch.Tensor:
        for i, value in enumerate(self._plan.values):
            if isinstance(value, TensorSpec) and value.fqn == name:
                obj = self._loaded.objects[i]
                if obj is None:
                    break
                return obj
        raise NotFound(f"{self._where}: has no attribute named {name!r}")

    def __del__(self) -> None:
        loaded = getattr(self, "_loaded", None)
        if loaded is not None:
            loaded.delegates.destroy()

    def __repr__(self) -> str:
        return f"Method({self.name!r})"

