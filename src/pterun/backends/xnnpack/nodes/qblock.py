"""Fully connected nodes with 4-bit weights in blocks along the input channels, times rows quantized at run
time, on the CPU: XNNPACK's qd8_f32_qb4w GEMM (the 8da4w layers of LLM exports), step for step, in the order
of the kernels ExecuTorch's runtime runs on this CPU (``isa.block_kernels``).

XNNPACK sums each block's int8 x int4 products in int32. Per output it starts from the row's zero point
times a float32 sum packed with the weights (``_start_sums``), adds float32(block sum) * block scale for
each block in order, then applies the row's scale and the bias. A block sum's product with its scale (a
bf16, 8 significant bits) is exact in float32 for blocks of up to 256 inputs, so each addition rounds once,
fused multiply-add or not. The two x86 kernel families differ after that:

* ``avx512vnni`` (CPUs with AVX-512 VNNI): one running sum per output; then times the row's scale and plus
  the bias, two roundings.
* ``avx2`` (AVX2 without AVX-512 VNNI): four running sums per output, lane ``j`` taking the inputs ``k`` with
  ``(k % 8) // 2 == j`` (its ``vpmaddwd`` pairs), the start value in lane 0; at the end ``(l0 + l1) + (l2 +
  l3)``, then one fused multiply-add: ``sum * row scale + bias`` rounded once (``qmath.emit_fma``).

Here, for ``avx512vnni``:

* block sums are integer products (``torch._int_mm``, int8 x int8 -> int32, exact: 4-bit weights cannot
  saturate oneDNN's 16-bit pair sums on any CPU);
* the products with the scales are exact, and ``index_add_`` adds them onto the start value one block
  after the other (it adds the slices of its source in index order), or ``addcmul_`` adds each block's
  as it is made; for large blocks of outputs, oneDNN's u8 x s8 product with the block's scales as its
  weight scales adds each block onto the running sum itself (its ``sum`` post-op: the exact product
  plus the sum, rounded once), one call per block;
* the row's scale and the bias follow, as in ``qlinear.dynamic``.

Few rows (decode) would pay a call per block, so their blocks go in groups of ``GROUP``: the rows are
written on the diagonal of a block-diagonal matrix (zeros elsewhere, so other blocks add nothing), whose
product with a group of blocks gives each block's sums as rows of its own, at ``GROUP`` times the
multiply-adds. From ``BLOCKWISE_ROWS`` rows on, each block is a product of its own.

For ``avx2``, where PyTorch's integer products are a scalar loop, the lanes' block sums are one batched
float32 product (exact: integers far below 2**24), scaled and added block after block with ``index_add_``;
the weights are held as float32.

On a CUDA device the product follows the CPU's family too, so that a GPU run gives the bits ExecuTorch gives
on the machine's CPU: one Triton kernel walks the blocks in order (``qblock_triton.py``), the weights as the
file packs them. Without Triton (or with ``native=False``), PyTorch's float32 lane sums as for ``avx2`` above,
one running sum for ``avx512vnni``, each block added on its own (``index_add_`` adds with atomics there).

Against ExecuTorch 1.5.1 the outputs are equal bit for bit on an x86-64 CPU with AVX-512 VNNI and on one
with AVX2 only (tested, the latter under an emulated AVX2 CPU). What can differ elsewhere, by float32
rounding only: XNNPACK's SSE and AVX kernels (x86 CPUs without AVX2) and its Arm kernels pack the start
value and sum in other orders (``other`` takes the ``avx2`` order); blocks of more than 256 inputs may have
block sums whose float32 products with a scale round here, where a fused multiply-add does not.
"""

from __future__ import annotations

import numpy as np
import torch

from pterun.backends.xnnpack.nodes import isa, native, qlinear, qmath
from pterun.backends.xnnpack.nodes.common import emit_float_clamp
from pterun.errors import DelegateInvalidCompatibility

GROUP = 4  # blocks per block-diagonal product: 4x the multiply-adds for a quarter of the calls (best at 1 row)
BLOCKWISE_ROWS = 16  # from this many rows on, a product per block (no wasted multiply-adds) costs less
# oneDNN's call costs ~40 us, ~20 more than _int_mm's; its fused scaling and adding saves more from about
# 128 x 2048 outputs per block on (measured: 123 us against 217 us there, 62 against 11 at 128 x 256)
ONEDNN_MIN_OUTPUTS = 1 << 18
START_CHUNK = 16  # XNNPACK's x86 packing folds the weights into the start value 16 at a time
LANES = 4  # the avx2 kernels' running sums per output


def applies(w, k: int, n: int) -> bool:
    """Whether the filter is whole blocks of 4-bit weights along the input channels, one scale per block."""
    q = w.quant
    blocks = k // q.block_size
    return (w.data is not None and w.datatype in qlinear.WEIGHTS_4BIT and q.axis == 0
            and blocks * q.block_size == k and tuple(q.scales.shape) == (n, blocks))


def _unpacked(w, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The filter as int16 [N, K], its block scales as float32 [N, blocks], and XNNPACK's start values [N]."""
    ints = qlinear.unpack_4bit(w.data, k)
    scales = w.quant.scales.float()
    return ints, scales, _start_sums(ints, scales, w.quant.block_size)


def _chunk(size: int) -> int:
    """The inputs XNNPACK sums at a time into a block layer's start values."""
    return START_CHUNK if size % START_CHUNK == 0 else size


def _start_sums(ints: torch.Tensor, scales: torch.Tensor, size: int) -> torch.Tensor:
    """-sum(weight * scale) per output channel, as XNNPACK packs it: float32, chunk by chunk in order."""
    n, k = ints.shape
    chunk = _chunk(size)
    sums = ints.reshape(n, k // chunk, chunk).sum(2, dtype=torch.int32).numpy().astype(np.float32)
    per_chunk = np.repeat(scales.numpy().astype(np.float32), size // chunk, axis=1)
    start = np.zeros(n, dtype=np.float32)
    for c in range(k // chunk):
        start = start - sums[:, c] * per_chunk[:, c]  # float32: an exact product, one rounding per step
    return torch.from_numpy(start)


def dynamic(node, b, q, w, bias, y, rows: int, k: int, n: int, shape) -> None:
    """Lines computing float ``y`` from the quantized rows ``q`` and blockwise 4-bit weights ``w``, and the node's
    clamp: pterun's native kernels where they run, else PyTorch's products in the same order."""
    if rows == 0:
        b.define(y.id, shape)
        return
    family = isa.cpu().block_kernels
    if native.enabled(b):
        _native(node, b, q, w, bias, y, rows, k, n, shape, "avx2" if family == "other" else family)
        return
    if b.device.type == "cuda" and _triton(node, b, q, w, bias, y, rows, k, n, shape,
                                           "avx512vnni" if family == "avx512vnni" else "avx2"):
        return
    if family == "avx512vnni" and b.device.type == "cpu":
        o = _vnni(b, q, w, bias, y, rows, k, n, shape)
    else:
        o = _float_lanes(b, q, w, bias, y, rows, k, n, shape, 1 if family == "avx512vnni" else LANES)
    emit_float_clamp(node, b, o)


def _native(node, b, q, w, bias, y, rows: int, k: int, n: int, shape, family: str) -> None:
    size = w.quant.block_size

    def prepare():
        # The start values from the packed nibbles in C: unpacking a 1B-parameter model's weights to int16 for
        # them took most of its load (3 of 4.8 s).
        scales = w.quant.scales.float()
        start = native.qb4w_start_sums(b, n, k, size, _chunk(size), w.data, scales)
        return native.qb4w_pack(b, family, n, k, size, w.data, scales, start,
                                None if bias is None else b.constant(bias), node.output_min, node.output_max)

    layer = b.cached(("qb4", "native", family), prepare)
    b.route(f"4-bit block product in the order of XNNPACK's {family} kernels (native, {native.qb4w_isa(layer)})")
    b.define(y.id, shape)
    native.emit_qb4w(b, layer, rows, n, q.int8_rows(b), k, q.zero_points, q.scales, b.ref(y.id))


def _triton(node, b, q, w, bias, y, rows: int, k: int, n: int, shape, family: str) -> bool:
    """The product in one Triton kernel on a CUDA device (qblock_triton.py); False where Triton is missing."""
    if b.options.get("native", True) is False:
        return False
    try:
        from pterun.backends.xnnpack.nodes import qblock_triton
    except ImportError:
        return False
    size = w.quant.block_size
    if size % 8:
        return False  # the PyTorch path says why

    def prepare():
        _, scales, start = _unpacked(w, k)
        return (w.data.contiguous().to(b.device), scales.t().contiguous().to(b.device), start.to(b.device),
                None if bias is None else b.constant(bias).contiguous())

    packed, scales, start, bias_t = b.cached(("qb4", "triton"), prepare)
    b.route(f"4-bit block product in the order of XNNPACK's {family} kernels (Triton)")
    o = b.define(y.id, shape)
    o2 = b.view(y.id, (rows, n))
    kernel = b.bind(qblock_triton.qb4w, "qb4w")
    b.emit(f"{kernel}({family!r}, {q.int8_rows(b)}, {b.bind(packed, 'w')}, {b.bind(scales, 'scales')}, "
           f"{b.bind(start, 'start')}, {q.zero_points}, {q.scales}, {b.bind(bias_t, 'bias')}, {o2}, {size})")
    emit_float_clamp(node, b, o)
    return True


def _vnni(b, q, w, bias, y, rows: int, k: int, n: int, shape) -> str:
    size = w.quant.block_size
    blocks = k // size
    grouped = rows < BLOCKWISE_ROWS
    onednn = not grouped and rows * n >= ONEDNN_MIN_OUTPUTS and isa.onednn_available()
    group = max(g for g in range(1, min(GROUP, blocks) + 1) if blocks % g == 0) if grouped else 1

    def prepare():
        ints, scales, start = _unpacked(w, k)  # ints: int16 [N, K]
        w8 = ints.to(torch.int8)
        if onednn:
            ops = [torch.ops.onednn.qlinear_prepack(w8[:, i * size:(i + 1) * size].contiguous(), [rows, size])
                   for i in range(blocks)]
        else:  # [K, N] operands of each group, as transposes of contiguous [N, K] pieces (_int_mm's fastest)
            per = group * size
            pieces = w8.view(n, blocks // group, per).transpose(0, 1).contiguous()
            ops = [pieces[i].t() for i in range(blocks // group)]
        return ops, scales.t().contiguous(), start

    ops, scales, start = b.cached(("qb4", grouped, onednn, group), prepare)
    way = "block-diagonal _int_mm" if grouped else "oneDNN u8 x s8" if onednn else "_int_mm"
    b.route(f"4-bit block product in the order of XNNPACK's avx512vnni kernels ({way} block sums)")
    o = b.define(y.id, shape)
    o2 = b.view(y.id, (rows, n))
    b.emit(f"torch.mul({q.zero_points}, {b.bind(start, 'start')}, out={o2})")
    if grouped:
        _grouped(b, q, ops, scales, rows, n, size, group, o2)
    elif onednn:
        xu = _block_rows(b, q, rows, blocks, size, torch.uint8)
        zeros = b.bind(torch.zeros(n, dtype=torch.int64), "zeros")
        for i, packed in enumerate(ops):
            b.emit(f"torch.ops.onednn.qlinear_pointwise.binary({b.bind(b.env[xu][i], 'xb')}, 1.0, 128, "
                   f"{b.bind(packed, 'w')}, {b.bind(scales[i], 'scale')}, {zeros}, {o2}, None, 1.0, 0, "
                   f"torch.float32, 1.0, 0, 'sum', 1.0, 'none', [], '')")
    else:
        xs = _block_rows(b, q, rows, blocks, size, torch.int8)
        acc, part = b.scratch((rows, n), torch.int32), b.scratch((rows, n))
        for i, operand in enumerate(ops):  # (an int32 operand of a float op would be converted into a new tensor)
            b.emit(f"torch._int_mm({b.bind(b.env[xs][i], 'xb')}, {b.bind(operand, 'w')}, out={acc})")
            b.emit(f"{part}.copy_({acc})")
            b.emit(f"{o2}.addcmul_({part}, {b.bind(scales[i], 'scale')})")
    b.emit(f"{o2}.mul_({q.scales})")
    if bias is not None:
        b.emit(f"{o2}.add_({b.ref(bias.id)})")
    return o


def _float_lanes(b, q, w, bias, y, rows: int, k: int, n: int, shape, lanes: int) -> str:
    """The product with float32 block sums (exact: integers far below 2**24): the ``avx2`` kernels' order with
    ``lanes`` 4, the ``avx512vnni`` kernels' with 1 (where integer products do not run: a GPU without Triton)."""
    size = w.quant.block_size
    blocks = k // size
    if size % 8:
        raise DelegateInvalidCompatibility(
            f"XNNPACK {b.where}: blocks of {size} inputs; the avx2 kernels' order needs a multiple of 8 "
            "(XNNPACK's own 4-bit kernels take multiples of 32)")
    part = size // lanes  # each lane's inputs of a block

    def prepare():
        ints, scales, start = _unpacked(w, k)  # ints: int16 [N, K]
        # [block, lane, input of the lane, output]: input k = block * size + 2 lanes c + 2 lane + t is lane
        # input 2 c + t
        weights = (ints.float().view(n, blocks, size // (2 * lanes), lanes, 2).permute(1, 3, 2, 4, 0)
                   .reshape(blocks * lanes, part, n).contiguous())
        return (weights.to(b.device), scales.t().contiguous().view(blocks, 1, 1, n).to(b.device),
                start.to(b.device))

    weights, scales, start = b.cached(("qb4", "lanes", lanes), prepare)
    family = "avx2" if lanes == LANES else "avx512vnni"
    b.route(f"4-bit block product in the order of XNNPACK's {family} kernels (float32 lane sums)")
    o = b.define(y.id, shape)
    o2 = b.view(y.id, (rows, n))
    lanes_x = b.scratch((blocks * lanes, rows, part))
    source = b.env[q.float_rows(b)].view(rows, blocks, size // (2 * lanes), lanes, 2).permute(1, 3, 0, 2, 4)
    b.emit(f"{b.bind(b.env[lanes_x].view(blocks, lanes, rows, size // (2 * lanes), 2), 'lx')}"
           f".copy_({b.bind(source, 'rows')})")
    sums = b.scratch((blocks * lanes, rows, n))
    b.emit(f"torch.bmm({lanes_x}, {b.bind(weights, 'w')}, out={sums})")
    products = b.bind(b.env[sums].view(blocks, lanes, rows, n), "p")
    b.emit(f"{products}.mul_({b.bind(scales, 'scales')})")  # exact: a block sum times a bf16
    acc = b.scratch((lanes, rows, n))
    b.emit(f"torch.mul({q.zero_points}, {b.bind(start, 'start')}, out={b.bind(b.env[acc][0], 'lane0')})")
    if lanes > 1:
        b.emit(f"{b.bind(b.env[acc][1:], 'lanes_rest')}.zero_()")
    _add_in_order(b, b.env[acc].view(1, -1), b.env[sums].view(blocks, -1))
    if lanes == 1:
        b.emit(f"torch.mul({b.bind(b.env[acc][0], 'sum')}, {q.scales}, out={o2})")
        if bias is not None:
            b.emit(f"{o2}.add_({b.ref(bias.id)})")
        return o
    lane = [b.bind(b.env[acc][j], f"l{j}") for j in range(lanes)]
    pair = b.scratch((rows, n))
    b.emit(f"torch.add({lane[0]}, {lane[1]}, out={o2})")
    b.emit(f"torch.add({lane[2]}, {lane[3]}, out={pair})")
    b.emit(f"{o2}.add_({pair})")
    if bias is None:
        b.emit(f"{o2}.mul_({q.scales})")
    else:
        addend = b.cached("bias64", lambda: b.constant(bias).double())
        qmath.emit_fma(b, o2, o2, q.scales, b.bind(addend, "bias64"), (rows, n))
    return o


def _add_in_order(b, acc: torch.Tensor, products: torch.Tensor) -> None:
    """Lines adding the rows of ``products`` [blocks, m] onto ``acc`` [1, m] one after the other, each addition
    rounded: ``index_add_`` on the CPU (it adds the slices of its source in index order); on a GPU it adds
    them with atomics, in no set order, so there each block is an addition of its own."""
    if acc.device.type == "cpu":
        index = b.bind(torch.zeros(products.shape[0], dtype=torch.int64), "first")
        b.emit(f"{b.bind(acc, 'acc')}.index_add_(0, {index}, {b.bind(products, 'p_flat')})")
        return
    b.emit(f"for _p in {b.bind(list(products.unsqueeze(1).unbind(0)), 'blocks')}:")
    b.emit(f"    {b.bind(acc, 'acc')}.add_(_p)")


def _grouped(b, q, ops, scales, rows: int, n: int, size: int, group: int, o2: str) -> None:
    groups = len(ops)
    blocks = groups * group
    diagonal = _block_diagonal(b, q, rows, blocks, size, group)
    sums = b.scratch((blocks * rows, n), torch.int32)
    products = b.scratch((blocks, rows * n))
    for i, operand in enumerate(ops):
        a = b.bind(b.env[diagonal][i].view(group * rows, group * size), "xd")
        part = b.bind(b.env[sums][i * group * rows:(i + 1) * group * rows], "sums")
        b.emit(f"torch._int_mm({a}, {b.bind(operand, 'w')}, out={part})")
    scaled = b.bind(b.env[products].view(blocks, rows, n), "p")
    b.emit(f"{scaled}.copy_({b.bind(b.env[sums].view(blocks, rows, n), 'sums')})")
    b.emit(f"{scaled}.mul_({b.bind(scales.view(blocks, 1, n), 'scales')})")
    index = b.bind(torch.zeros(blocks, dtype=torch.int64), "first")
    b.emit(f"{b.bind(b.env[o2].view(1, rows * n), 'acc')}.index_add_(0, {index}, {products})"
           if o2 in b.env else f"{o2}.view(1, {rows * n}).index_add_(0, {index}, {products})")


def _block_diagonal(b, q, rows: int, blocks: int, size: int, group: int) -> str:
    """The int8 rows on the diagonal of [groups, group, rows, group * size] (block j of group i at [i, j, :, j]),
    zeros elsewhere: made once per quantized value and grouping, the zeros filled at load."""
    key = ("diagonal", size, group)
    if key not in q.forms:
        groups = blocks // group
        d = b.scratch((groups, group, rows, group * size), torch.int8, fill=0)
        into = b.bind(b.env[d].view(groups, group, rows, group, size).diagonal(dim1=1, dim2=3), "diag")
        # straight from the float rows of integers (the copy converts them exactly)
        source = b.bind(b.env[q.float_rows(b)].view(rows, groups, group, size).permute(1, 0, 3, 2), "rows")
        b.emit(f"{into}.copy_({source})")
        q.forms[key] = d
    return q.forms[key]


def _block_rows(b, q, rows: int, blocks: int, size: int, dtype: torch.dtype) -> str:
    """The rows block by block, [blocks, rows, size]: int8, or uint8 plus 128 (top bit flipped) for oneDNN."""
    key = ("blocks", size, dtype)
    if key not in q.forms:
        t = b.scratch((blocks, rows, size), dtype)
        if dtype == torch.uint8:
            source = b.env[q.int8_rows(b)].view(rows, blocks, size).transpose(0, 1)
            top = b.bind(torch.tensor(128, dtype=torch.uint8), "top")  # a tensor: a Python 128 is wrapped per call
            b.emit(f"torch.bitwise_xor({b.bind(source.view(torch.uint8), 'rows')}, {top}, out={t})")
        else:  # straight from the float rows of integers
            source = b.env[q.float_rows(b)].view(rows, blocks, size).transpose(0, 1)
            b.emit(f"{t}.copy_({b.bind(source, 'rows')})")
        q.forms[key] = t
    return q.forms[key]
