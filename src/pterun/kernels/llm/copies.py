"""llama::fallback and preprocess::tile_crop: operators that only move values."""

from __future__ import annotations

from pterun.errors import InvalidArgument
from pterun.kernels.python_kernels import KernelTable, resize

KERNELS = KernelTable()


@KERNELS.kernel("llama::fallback.out(Tensor input, *, Tensor(a!) output) -> Tensor(a!)")
def fallback(input, output):
    if input.dtype != output.dtype:
        raise InvalidArgument(f"fallback: input is {input.dtype} but output is {output.dtype}")
    resize(output, input.shape)
    output.copy_(input)
    return output


@KERNELS.kernel("preprocess::tile_crop.out(Tensor input, int tile_size, *, Tensor(a!) out) -> Tensor(a!)")
def tile_crop(input, tile_size, out):
    """[C, H, W] -> [tiles, C, tile, tile], tiles in row-major order over the image."""
    what = "tile_crop"
    if input.dtype != out.dtype or input.dim() != 3 or tile_size <= 0:
        raise InvalidArgument(f"{what}: expected a 3-d input, an out of its dtype and a positive tile size")
    channels, height, width = input.shape
    if height % tile_size or width % tile_size:
        raise InvalidArgument(f"{what}: {height}x{width} is not a multiple of the tile size {tile_size}")
    rows, cols = height // tile_size, width // tile_size
    resize(out, (rows * cols, channels, tile_size, tile_size))
    tiles = input.reshape(channels, rows, tile_size, cols, tile_size).permute(1, 3, 0, 2, 4)
    out.copy_(tiles.reshape(rows * cols, channels, tile_size, tile_size))
    return out
