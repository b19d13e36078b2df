"""pterun on Ray Data (extra ``pterun[ray]``): a program run over a whole dataset by a pool of actors.

``PteRunner`` is the callable class for ``Dataset.map_batches``; ``read_input`` reads what ``pterun batch``
takes (Parquet, .npy/.npz, a folder of images) with a ``row`` column numbering the rows. The runtime
itself never imports Ray (docs/batch.md).
"""

from pterun.ray.runner import ERROR_COLUMN, PteRunner

__all__ = ["ERROR_COLUMN", "PteRunner"]
