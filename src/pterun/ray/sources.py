"""What ``pterun batch`` reads, as a Ray dataset whose ``row`` column numbers the rows from 0.

Parquet (a file or a folder of them) is read one row group per task, each knowing its first row's
number from the files' footers; .npy (one column, ``data``) and .npz (a column per array, in the
file's order) are cut into blocks on the driver; a folder of images is listed on the driver and
decoded in tasks, each image made what the program's input takes (see :class:`ImageFormat`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray

from pterun.errors import InvalidArgument

ROW = "row"
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}


def _table(columns: dict[str, np.ndarray]) -> pa.Table:
    from ray.data.extensions import ArrowTensorArray

    return pa.table({name: ArrowTensorArray.from_numpy(values) if values.ndim > 1 else pa.array(values)
                     for name, values in columns.items()})


def _blocks(n: int, rows_per_block: int) -> list[tuple[int, int]]:
    step = max(1, rows_per_block)
    return [(start, min(n, start + step)) for start in range(0, n, step)]


def read_numpy(path: Path, rows_per_block: int) -> ray.data.Dataset:
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as loaded:
            arrays = {name: loaded[name] for name in loaded.files}
    else:
        arrays = {"data": np.load(path, mmap_mode="r", allow_pickle=False)}  # Ray's from_numpy's column name
    lengths = {len(a) for a in arrays.values()}
    if len(lengths) != 1:
        raise InvalidArgument(f"{path}: its arrays have different numbers of rows "
                              f"({', '.join(f'{k}: {len(v)}' for k, v in arrays.items())})")
    if ROW in arrays:
        raise InvalidArgument(f"{path}: has an array named {ROW!r}, the name pterun batch numbers rows with")
    return from_arrays(arrays, rows_per_block)


def from_arrays(arrays: dict[str, np.ndarray], rows_per_block: int) -> ray.data.Dataset:
    """Columns of equal length as a dataset of blocks of ``rows_per_block`` rows, with a ``row`` column."""
    n = len(next(iter(arrays.values())))
    return ray.data.from_arrow([_table({**{k: np.asarray(v[a:b]) for k, v in arrays.items()}, ROW: np.arange(a, b)})
                                for a, b in _blocks(n, rows_per_block)])


def _parquet_pieces(files: list[Path]) -> list[dict]:
    pieces, offset = [], 0
    for file in files:
        meta = pq.read_metadata(file)
        for group in range(meta.num_row_groups):
            pieces.append({"path": str(file), "group": group, "first": offset})
            offset += meta.row_group(group).num_rows
    return pieces


def _read_piece(batch: dict) -> pa.Table:
    tables = []
    for path, group, first in zip(batch["path"], batch["group"], batch["first"]):
        table = pq.ParquetFile(str(path)).read_row_group(int(group))
        tables.append(table.append_column(ROW, pa.array(np.arange(first, first + table.num_rows))))
    return pa.concat_tables(tables)


def read_parquet(path: Path) -> ray.data.Dataset:
    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    if not files:
        raise InvalidArgument(f"{path}: no .parquet files in this folder")
    pieces = _parquet_pieces(files)
    if not pieces:
        raise InvalidArgument(f"{path}: no rows")
    for piece in pieces:  # the row column is ours
        if ROW in pq.read_schema(piece["path"]).names:
            raise InvalidArgument(f"{piece['path']}: has a column named {ROW!r}, the name pterun batch numbers "
                                  f"rows with")
    return ray.data.from_items(pieces, override_num_blocks=len(pieces)).map_batches(
        _read_piece, batch_size=1, batch_format="numpy")


@dataclass(frozen=True)
class ImageFormat:
    """What an image becomes for an input of ``sizes`` (its batch dimension left out) and NumPy ``dtype``.

    An image is decoded to RGB (or grayscale for one channel), resized to the input's height and width,
    laid out channels-first when the input's first dimension is its channels (1 or 3) and channels-last
    otherwise, and scaled to [0, 1] for a floating-point input (uint8 stays 0-255). No mean or standard
    deviation is applied: a program that wants them is fed a Parquet or NumPy file instead.
    """

    sizes: tuple[int, int, int]
    dtype: str

    @property
    def channels_first(self) -> bool:
        return self.sizes[0] in (1, 3) and self.sizes[2] not in (1, 3)

    def __call__(self, path: str) -> np.ndarray:
        from PIL import Image

        c, h, w = self.sizes if self.channels_first else (self.sizes[2], self.sizes[0], self.sizes[1])
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("L" if c == 1 else "RGB").resize((w, h), Image.Resampling.BILINEAR))
        pixels = pixels.reshape(h, w, c)
        if self.channels_first:
            pixels = pixels.transpose(2, 0, 1)
        dtype = np.dtype(self.dtype)
        return (pixels / np.float32(255)).astype(dtype) if np.issubdtype(dtype, np.floating) else pixels.astype(dtype)


def read_images(folder: Path, image: ImageFormat, rows_per_block: int) -> ray.data.Dataset:
    paths = sorted(str(p) for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not paths:
        raise InvalidArgument(f"{folder}: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in this folder")
    tables = [_table({"path": np.array(paths[a:b]), ROW: np.arange(a, b)})
              for a, b in _blocks(len(paths), rows_per_block)]

    def decode(batch: dict) -> dict:
        return {"image": np.stack([image(p) for p in batch["path"]]), "path": batch["path"], ROW: batch[ROW]}

    return ray.data.from_arrow(tables).map_batches(decode, batch_format="numpy")


def read_input(path: Path, *, rows_per_block: int, image: ImageFormat | None) -> ray.data.Dataset:
    """``path`` as a dataset with a ``row`` column: Parquet, .npy/.npz, or a folder of images."""
    if not path.exists():
        raise InvalidArgument(f"{path}: no such file or folder")
    if path.suffix == ".parquet" or (path.is_dir() and any(path.rglob("*.parquet"))):
        return read_parquet(path)
    if path.suffix in (".npy", ".npz"):
        return read_numpy(path, rows_per_block)
    if path.is_dir():
        if image is None:
            raise InvalidArgument(f"{path}: a folder of images needs a program whose input is one image "
                                  f"(3 dimensions per row)")
        return read_images(path, image, rows_per_block)
    raise InvalidArgument(f"{path}: expected a .parquet file, a .npy or .npz file, or a folder of images or "
                          f"Parquet files")
