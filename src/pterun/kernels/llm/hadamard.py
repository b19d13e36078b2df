"""llama::fast_hadamard_transform: the normalized Hadamard transform of the last dimension."""

from __future__ import annotations

import math

import torch

from pterun.errors import InvalidArgument
from pterun.kernels.python_kernels import F32, KernelTable, resize

KERNELS = KernelTable()


# The 28 x 28 Hadamard matrix (Williamson construction, N. J. A. Sloane's library) that
# ExecuTorch applies for sizes of 28 * 2^k, one row of signs per output.
_HADAMARD_28 = (
    "+------++----++-+--+-+--++--", "-+-----+++-----+-+--+-+--++-", "--+-----+++---+-+-+----+--++",
    "---+-----+++---+-+-+-+--+--+", "----+-----+++---+-+-+++--+--", "-----+-----++++--+-+--++--+-",
    "------++----++-+--+-+--++--+", "--++++-+-------++--+++-+--+-", "---++++-+-----+-++--+-+-+--+",
    "+---+++--+----++-++--+-+-+--", "++---++---+----++-++--+-+-+-", "+++---+----+----++-++--+-+-+",
    "++++--------+-+--++-++--+-+-", "-++++--------+++--++--+--+-+", "-+-++-++--++--+--------++++-",
    "+-+-++--+--++--+--------++++", "-+-+-++--+--++--+----+---+++", "+-+-+-++--+--+---+---++---++",
    "++-+-+-++--+------+--+++---+", "-++-+-+-++--+------+-++++---", "+-++-+---++--+------+-++++--",
    "-++--++-+-++-+++----++------", "+-++--++-+-++-+++-----+-----", "++-++---+-+-++-+++-----+----",
    "-++-++-+-+-+-+--+++-----+---", "--++-++++-+-+----+++-----+--", "+--++-+-++-+-+----+++-----+-",
    "++--++-+-++-+-+----++------+",
)


def _walsh_hadamard(x: torch.Tensor, log2_n: int) -> torch.Tensor:
    """Normalized Walsh-Hadamard transform of the last dimension (2^log2_n), in x's own type."""
    if log2_n == 0:
        return x
    n = 1 << log2_n
    lead = x.shape[:-1]
    step = 1
    while step < n:
        pairs = x.reshape(*lead, n // (2 * step), 2, step)
        a, b = pairs[..., 0, :], pairs[..., 1, :]
        x = torch.stack((a + b, a - b), dim=-2).reshape(*lead, n)
        step *= 2
    # 1 / 2^(k/2), formed in the tensor's type: a power of two, times sqrt(2) for odd k.
    root = torch.tensor(float(1 << (log2_n // 2)), dtype=x.dtype)
    if log2_n % 2:
        root = root * torch.tensor(math.sqrt(2.0), dtype=x.dtype)
    inv = torch.tensor(1.0, dtype=x.dtype) / root
    return x * inv.to(x.device)


@KERNELS.kernel("llama::fast_hadamard_transform.out(Tensor mat, *, Tensor(a!) out) -> Tensor(a!)")
def fast_hadamard_transform(mat, out):
    what = "fast_hadamard_transform"
    resize(out, mat.shape)
    if mat.dtype != out.dtype:
        raise InvalidArgument(f"{what}: mat is {mat.dtype} but out is {out.dtype}")
    if mat.dim() == 0 or mat.numel() == 0:
        return out
    if mat.dtype not in (torch.float32, torch.float64, torch.float16):
        raise InvalidArgument(f"{what}: unsupported dtype {mat.dtype}")
    size = mat.shape[-1]
    by_28 = size % 28 == 0
    power = size // 28 if by_28 else size
    if power & (power - 1):
        raise InvalidArgument(f"{what}: the last dimension ({size}) must be a power of 2 or 28 times one")
    log2_n = power.bit_length() - 1
    if not by_28:
        out.copy_(_walsh_hadamard(mat, log2_n))
        return out
    blocks = _walsh_hadamard(mat.reshape(*mat.shape[:-1], 28, power), log2_n)
    # Then a 28-point Hadamard across the blocks, summed left to right as ExecuTorch's generated code does.
    # A half row that opens with +x[0] promotes to float and rounds once at the end; one that opens
    # with -x[0] stays in half and rounds after every term.
    rows = []
    for signs in _HADAMARD_28:
        wide = mat.dtype == torch.float16 and signs[0] == "+"
        terms = blocks.to(F32) if wide else blocks
        acc = terms[..., 0, :] if signs[0] == "+" else -terms[..., 0, :]
        for j in range(1, 28):
            acc = acc + terms[..., j, :] if signs[j] == "+" else acc - terms[..., j, :]
        rows.append(acc.to(mat.dtype))
    out.copy_(torch.stack(rows, dim=-2).reshape(mat.shape))
    return out
