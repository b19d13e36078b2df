"""A spec becomes an ``nn.Module`` (one interpreter for every spec), inputs for each call, and an ExportSpec.

Every number is a function of the spec's seed and a name: weights of node ``n3``
from ``(seed, "n3", "weight")``, inputs of call ``k`` from ``(seed, k, "x0")``. Values
lie on a grid (multiples of 1/16, small), so sums and products are exact in
float32 and two runtimes summing in different orders agree bit for bit until a
transcendental function rounds.
"""

from __future__ import annotations

import zlib

import torch

from tests.fuzz.check import check
from tests.fuzz.ops import OPS, Ctx, Param
from tests.fuzz.spec import DTYPES, Spec, TensorDecl
from tests.support.exporting import ExportSpec

LOWERINGS = ("portable", "xnnpack")


def _generator(*key) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32("/".join(map(str, key)).encode()))


def values(shape, dtype: str, g: torch.Generator, init: str = "input", bound: int = 0) -> torch.Tensor:
    dt = DTYPES[dtype]
    if init == "index":
        return torch.randint(0, bound, shape, generator=g, dtype=dt)
    if init == "permutation":
        return torch.randperm(bound, generator=g)[: shape[0]].to(dt)
    if dtype == "bool":
        return torch.randint(0, 2, shape, generator=g).bool()
    if not dt.is_floating_point:
        return torch.randint(-8, 9, shape, generator=g, dtype=dt)
    if init == "positive":
        return (torch.randint(4, 18, shape, generator=g) / 8).to(dt)
    if init == "input":
        return (torch.randint(-32, 33, shape, generator=g) / 16).to(dt)  # [-2, 2] in steps of 1/16
    return (torch.randint(-8, 9, shape, generator=g) / 16).to(dt)  # weights: [-1/2, 1/2]


def param_value(spec: Spec, node_id: str, name: str, p: Param) -> torch.Tensor:
    return values(p.shape, p.dtype, _generator(spec.seed, node_id, name), p.init, p.bound)


class Program(torch.nn.Module):
    """Runs a spec's nodes in order; weights are parameters, index constants and mutable state are buffers."""

    def __init__(self, spec: Spec):
        super().__init__()
        state = check(spec)
        self.spec = spec
        self.consts: dict[str, dict[str, str]] = {}
        for node in spec.nodes:
            op = OPS[node.op]
            if op.params is None:
                continue
            params = op.params([state.values[a] for a in node.args], node.attrs)
            names = self.consts[node.id] = {}
            for pname, p in params.items():
                attr = names[pname] = f"{node.id}_{pname}"
                value = param_value(spec, node.id, pname, p)
                if value.is_floating_point():
                    self.register_parameter(attr, torch.nn.Parameter(value, requires_grad=False))
                else:
                    self.register_buffer(attr, value)
        for decl in spec.buffers:
            init = (
                torch.zeros(decl.shape, dtype=DTYPES[decl.dtype])
                if decl.init == "zeros"
                else values(decl.shape, decl.dtype, _generator(spec.seed, "buffer", decl.name))
            )
            self.register_buffer(decl.name, init)

    def forward(self, *inputs):
        spec = self.spec
        env = {decl.name: x for decl, x in zip(spec.inputs, inputs)}
        env.update({decl.name: getattr(self, decl.name) for decl in spec.buffers})
        sizes = {}
        for decl, x in zip(spec.inputs, inputs):
            for i, d in enumerate(decl.shape):
                if isinstance(d, str) and d not in sizes:
                    sizes[d] = x.shape[i]
        for node in spec.nodes:
            op = OPS[node.op]
            params = {p: getattr(self, attr) for p, attr in self.consts.get(node.id, {}).items()}
            out = op.run(Ctx(sizes, params), *[env[a] for a in node.args], **node.attrs)
            if op.kind != "inplace":
                for decl, t in zip(node.outs, out if isinstance(out, (tuple, list)) else [out]):
                    env[decl.name] = t
        return tuple(env[name] for name in spec.outputs)


def sizes_for_call(spec: Spec, call: int) -> dict[str, int]:
    """Call 0 has the example sizes (exported with), then the upper bound, the lower, then random ones."""
    out = {}
    for s in spec.symbols:
        if call < 3:
            out[s.name] = (s.example, s.max, s.min)[call]
        else:
            out[s.name] = int(
                torch.randint(s.min, s.max + 1, (1,), generator=_generator(spec.seed, call, s.name))
            )
    return out


def make_inputs(spec: Spec, call: int) -> list[torch.Tensor]:
    sizes = sizes_for_call(spec, call)
    return [
        values(_concrete(decl, sizes), decl.dtype, _generator(spec.seed, call, decl.name))
        for decl in spec.inputs
    ]


def _concrete(decl: TensorDecl, sizes: dict[str, int]) -> list[int]:
    return [d if isinstance(d, int) else sizes[d] for d in decl.shape]


def dynamic_shapes(spec: Spec):
    if not spec.symbols:
        return None
    dims = {s.name: torch.export.Dim(s.name, min=s.min, max=s.max) for s in spec.symbols}
    # forward(*inputs): one entry for the variadic argument, holding one per input.
    return (
        tuple(
            {i: dims[d] for i, d in enumerate(decl.shape) if isinstance(d, str)} or None
            for decl in spec.inputs
        ),
    )


def xnnpack_partitioners() -> list:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    return [XnnpackPartitioner()]


def export_spec(spec: Spec, lowering: str) -> ExportSpec:
    config = {}
    stored = [b.name for b in spec.buffers if b.init == "values"]
    if stored:
        from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

        # Buffers left out start from the runtime's zeroed arena, so they are initialized with zeros.
        config["passes"] = [InitializedMutableBufferPass(stored)]
    return ExportSpec(
        Program(spec).eval(),
        tuple(make_inputs(spec, 0)),
        dynamic_shapes=dynamic_shapes(spec),
        lower="portable" if lowering == "portable" else xnnpack_partitioners,
        config=config,
    )


def eager(spec: Spec) -> Program:
    return Program(spec).eval()
