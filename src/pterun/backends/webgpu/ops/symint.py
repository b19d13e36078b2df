"""Integer arithmetic on sizes (SymInts), evaluated on the host whenever a shape it reads changes.

No kernel: these operators only feed the resize hooks of the operators that
read their results.
"""

from __future__ import annotations

import operator

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.ops.common import norm_dim


def build_sym_size(b: NodeBuilder, op) -> None:
    x = b.tensor(op.args[0])
    rank = b.rank(op.args[0])
    dim = norm_dim(b.scalar(op.args[1]), rank)
    b.sym_out(op.args[-1], lambda: x.shape[dim])


def _arith(fn):
    def build(b: NodeBuilder, op) -> None:
        lhs, rhs = b.int(op.args[0]), b.int(op.args[1])
        b.sym_out(op.args[-1], lambda: int(fn(lhs(), rhs())))

    return build


OPS = {
    "sym_size.int": build_sym_size,
    "aten.sym_size.int": build_sym_size,
    "add": _arith(operator.add),
    "sub": _arith(operator.sub),
    "mul": _arith(operator.mul),
    "floordiv": _arith(operator.floordiv),
}
