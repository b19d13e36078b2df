"""The in-place form of the out-of-place update torch.export writes for a mutable buffer (a static KV cache's
``index_put.out``; ``index_copy_`` is exported as one too), for the executor's rewrite of an update it copies
back into its buffer (executor/load/in_place.py): called with the buffer and the update's operands, its result
(the buffer's tensor) assigned to the update's."""

from __future__ import annotations

import torch

from pterun.kernels.registry import Binding

# index_put_(self, indices (optional tensors), values, accumulate): ATen's own overload, which takes the None
# entries of an index list as the program passes them (Tensor.index_put_ refuses them).
INDEX_PUT = Binding(torch.ops.aten.index_put_.default, (0, 1, 2, 3), result=4, mutates=(0,), aliases=(0,))
