"""The code a method compiles into reads without the program beside it, and names from the file cannot
change what it does (``pterun inspect --code`` prints it)."""

from __future__ import annotations

import torch

import pterun
from pterun import native
from pterun.kernels import fixed_arity
from tests.format import build


def _program(op: str, overload: str) -> bytes:
    # out = op(x, x, alpha=1), every tensor planned.
    plan = build.Plan(
        values=[build.Tensor(memory=(1, 0)), ("int", 1), build.Tensor(memory=(1, 8))], inputs=[0], outputs=[2],
        instructions=[("kernel", 0, [0, 0, 1, 2, 2])], operators=[(op, overload)], buffer_sizes=[0, 16],
    )
    return build.program([plan])


def _body(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines()[2:-2]]  # inside run(), before its return


def test_each_call_is_named_after_its_operator_and_scalars_are_inline():
    method = pterun.Runtime.get().load_program(_program("aten::add", "out")).load_method("forward")
    header = method.source.splitlines()[0]
    assert "add_out(c0, c0, alpha=1, out=c2)  # aten::add.out" in _body(method.source)
    # Only what the code uses is bound: the kernel and the two planned tensors, in natural order (and, where the
    # native kernels are built, the replay of the add's native call: codegen/runs.py).
    replay = "_replay0, " if native.kernels is not None else ""
    assert header == f"def __make({replay}add_out, c0, c2):"
    (out,) = method.execute([torch.ones(2)])
    assert torch.equal(out, torch.full((2,), 2.0))


def test_an_operator_name_cannot_write_code():
    """A kernel registered under a name with a newline, quotes and a terminal escape: the name reaches the
    source as an identifier of letters, digits and underscores, and escaped in the comment."""
    op, overload = "evil::op\nimport os; os._exit(3) #'\x1b[31m", "out"
    name = f"{op}.{overload}"
    runtime = pterun.Runtime()
    runtime.registries.kernels.register(
        name, fixed_arity(lambda a, b, alpha, out: out.copy_(a + b), 5, name, result=False, mutates=(3,)))
    method = runtime.load_program(_program(op, overload)).load_method("forward")
    (line,) = _body(method.source)
    kernel, comment = line.split("  # ")
    assert kernel == "evil_op_import_os__os__exit_3______31m_out(c0, c0, 1, c2)"
    assert comment == ascii(name)[1:-1] and comment.isprintable() and "\n" not in method.source.splitlines()[2]
    (out,) = method.execute([torch.ones(2)])
    assert torch.equal(out, torch.full((2,), 2.0))
