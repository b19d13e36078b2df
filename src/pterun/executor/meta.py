"""MethodMeta and TensorInfo: what a method takes and returns, readable without loading it.

The classes mirror ExecuTorch's Python bindings (methods, not properties, and
the same ``repr``), so code written against ``executorch.runtime`` reads them
unchanged. A few methods are pterun's own (``TensorInfo.dynamism``
and ``name``; ``MethodMeta.input_value``, ``tensors``, ``tensor_meta``,
``memory_plan`` and ``instructions``): what the CLI, the LLM runner and Ray's reader need, so none
of them reads the file's raw plan.
"""

from __future__ import annotations

from pterun.core.device import Device, DeviceType
from pterun.core.dtype import name as dtype_name
from pterun.errors import IndexOutOfRange
from pterun.format import Dynamism, Kind, Plan, Scalar, TensorSpec
from pterun.format.lifetimes import ArenaPlan, memory_plan

# ExecuTorch's runtime Tag names, by the format's value kind.
_TAG_NAMES = {
    Kind.NULL: "None", Kind.INT: "Int", Kind.BOOL: "Bool", Kind.DOUBLE: "Double", Kind.TENSOR: "Tensor",
    Kind.STRING: "String", Kind.INT_LIST: "ListInt", Kind.DOUBLE_LIST: "ListDouble", Kind.BOOL_LIST: "ListBool",
    Kind.TENSOR_LIST: "ListTensor", Kind.OPTIONAL_TENSOR_LIST: "ListOptionalTensor",
}

_DYNAMISM = {Dynamism.STATIC: "static", Dynamism.DYNAMIC_BOUND: "bounded", Dynamism.DYNAMIC_UNBOUND: "unbounded"}


class TensorInfo:
    __slots__ = ("_spec",)

    def __init__(self, spec: TensorSpec) -> None:
        self._spec = spec

    def sizes(self) -> tuple[int, ...]:
        return tuple(self._spec.sizes)

    def dim_order(self) -> tuple[int, ...]:
        return tuple(self._spec.dim_order)

    def dtype(self) -> int:
        return self._spec.scalar_type

    def is_memory_planned(self) -> bool:
        return self._spec.is_memory_planned

    def nbytes(self) -> int:
        return self._spec.nbytes

    def dynamism(self) -> str:
        """"static", or how its sizes may change: "bounded" (``sizes()`` is the upper bound) or "unbounded".
        pterun's own."""
        return _DYNAMISM[self._spec.dynamism]

    def name(self) -> str | None:
        """The name the file gives the tensor (a mutable buffer's or an external constant's fqn), or None.
        pterun's own."""
        return self._spec.fqn or None

    def __repr__(self) -> str:
        return (
            f"TensorInfo(sizes={list(self._spec.sizes)}, dtype={dtype_name(self._spec.scalar_type)}, "
            f"is_memory_planned={self._spec.is_memory_planned}, nbytes={self._spec.nbytes})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorInfo) and other._spec == self._spec

    def __hash__(self) -> int:
        return hash(self._spec)


class MethodMeta:
    def __init__(self, plan: Plan) -> None:
        self._plan = plan
        self._attributes = [v for v in plan.values if isinstance(v, TensorSpec) and v.fqn is not None]
        self._memory_plan: tuple[ArenaPlan, ...] | None = None

    def name(self) -> str:
        return self._plan.name

    def num_inputs(self) -> int:
        return len(self._plan.inputs)

    def num_outputs(self) -> int:
        return len(self._plan.outputs)

    def num_attributes(self) -> int:
        return len(self._attributes)

    def input_tag(self, index: int) -> str:
        return _TAG_NAMES[self._io(self._plan.inputs, index, "input").kind]

    def output_tag(self, index: int) -> str:
        return _TAG_NAMES[self._io(self._plan.outputs, index, "output").kind]

    def input_tensor_meta(self, index: int) -> TensorInfo:
        return self._tensor(self._plan.inputs, index, "input")

    def output_tensor_meta(self, index: int) -> TensorInfo:
        return self._tensor(self._plan.outputs, index, "output")

    def attribute_tensor_meta(self, index: int) -> TensorInfo:
        if not 0 <= index < len(self._attributes):
            raise IndexOutOfRange(f"attribute {index} does not exist; the method has {len(self._attributes)}")
        return TensorInfo(self._attributes[index])

    def num_memory_planned_buffers(self) -> int:
        return len(self._plan.arena_sizes)

    def memory_planned_buffer_size(self, index: int) -> int:
        sizes = self._plan.arena_sizes
        if not 0 <= index < len(sizes):
            raise IndexOutOfRange(f"planned buffer {index} does not exist; the method has {len(sizes)}")
        return sizes[index]

    def memory_planned_buffer_device(self, index: int) -> str:
        """The device planned buffer ``index`` is tagged for ("cpu", "cuda:0")."""
        self.memory_planned_buffer_size(index)
        device_type, device_index = self._plan.arena_device(index + 1)
        return str(Device(DeviceType(device_type), device_index))

    def operators(self) -> list[str]:
        """The operators the method calls, as ``namespace::name.overload``."""
        return [self._plan.operator_name(i) for i in range(len(self._plan.operators))]

    def num_instructions(self) -> int:
        return len(self._plan.instructions)

    def instructions(self) -> list[tuple[str, str]]:
        """Each instruction's name and category: an operator call's operator (``("aten::add.out",
        "operator")``), a delegate call's backend (``("XnnpackBackend", "delegate")``), or the format's own
        instruction (``("MoveCall", "instruction")``), in the chain's order. pterun's own."""
        plan = self._plan
        return [(ins.label(plan), ins.category) for ins in plan.instructions]

    def num_backends(self) -> int:
        return len(self._plan.delegates)

    def get_backend_name(self, index: int) -> str:
        if not 0 <= index < len(self._plan.delegates):
            raise IndexOutOfRange(f"backend {index} does not exist; the method has {len(self._plan.delegates)}")
        return self._plan.delegates[index].backend_id

    def uses_backend(self, name: str) -> bool:
        return any(d.backend_id == name for d in self._plan.delegates)

    def input_value(self, index: int) -> bool | int | float | str | None:
        """The value non-tensor input ``index`` was exported with (an int, a float, a bool, a string or None).
        pterun's own."""
        value = self._io(self._plan.inputs, index, "input")
        if not isinstance(value, Scalar):
            raise IndexOutOfRange(f"input {index} is a {_TAG_NAMES[value.kind]}, not a single value")
        return value.value

    def tensors(self) -> list[int]:
        """The value indices of every tensor of the method (inputs, outputs, constants, intermediates), in order.
        pterun's own."""
        return [i for i, v in enumerate(self._plan.values) if isinstance(v, TensorSpec)]

    def tensor_meta(self, value: int) -> TensorInfo:
        """Value ``value``'s tensor (an index from ``tensors()`` or ``memory_plan()``). pterun's own."""
        values = self._plan.values
        if not 0 <= value < len(values):
            raise IndexOutOfRange(f"value {value} does not exist; the method has {len(values)}")
        spec = values[value]
        if not isinstance(spec, TensorSpec):
            raise IndexOutOfRange(f"value {value} is a {_TAG_NAMES[spec.kind]}, not a tensor")
        return TensorInfo(spec)

    def memory_plan(self) -> tuple[ArenaPlan, ...]:
        """Each planned buffer's tensors: where each lies and the instructions it is live over (worked out once).
        pterun's own."""
        if self._memory_plan is None:
            self._memory_plan = memory_plan(self._plan)
        return self._memory_plan

    def _io(self, indices, index: int, what: str):
        if not 0 <= index < len(indices):
            raise IndexOutOfRange(f"{what} {index} does not exist; the method has {len(indices)} {what}s")
        return self._plan.values[indices[index]]

    def _tensor(self, indices, index: int, what: str) -> TensorInfo:
        value = self._io(indices, index, what)
        if not isinstance(value, TensorSpec):
            raise IndexOutOfRange(f"{what} {index} is a {_TAG_NAMES[value.kind]}, not a tensor")
        return TensorInfo(value)

    def _describe(self, indices) -> list[str]:
        out = []
        for vi in indices:
            value = self._plan.values[vi]
            out.append(repr(TensorInfo(value)) if isinstance(value, TensorSpec) else _TAG_NAMES[value.kind])
        return out

    def __repr__(self) -> str:
        return (
            f"MethodMeta(name={self._plan.name!r}, num_inputs={self.num_inputs()}, "
            f"input_tensor_meta={self._describe(self._plan.inputs)}, num_outputs={self.num_outputs()}, "
            f"output_tensor_meta={self._describe(self._plan.outputs)})"
        )
