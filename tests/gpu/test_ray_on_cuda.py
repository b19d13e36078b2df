"""GPU actors (one GPU each, and two sharing one) give what a loop over the same rows on the GPU gives."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pterun import Runtime
from pterun.cli.options import example_program

pytestmark = [pytest.mark.gpu,
              pytest.mark.needs_package("ray.data", "needs Ray (pterun[ray]), which this machine does not have")]


@pytest.fixture(scope="module")
def cluster():
    from tests.support.ray_cluster import start

    ray = start(num_cpus=4, num_gpus=1)
    yield ray
    ray.shutdown()


@pytest.mark.parametrize("share", [1, 0.5], ids=["one-gpu", "half-a-gpu"])
def test_gpu_actors_give_what_a_gpu_loop_gives(cluster, share, tmp_path):
    from pterun.ray import PteRunner
    from pterun.ray.sources import from_arrays

    tokens = np.random.default_rng(0).integers(0, 1000, (12, 16), dtype=np.int64)
    actors = 1 if share == 1 else 2
    ds = from_arrays({"tokens": tokens}, rows_per_block=2).map_batches(
        PteRunner, fn_constructor_kwargs={"program": str(example_program()), "device": "cuda",
                                          "_test_dir": str(tmp_path), "_wait_for_actors": actors},
        batch_size=2, num_gpus=share, batch_format="numpy",
        compute=cluster.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1))
    out = ds.to_pandas().sort_values("row")
    processes = {p.name.split("-")[1] for p in tmp_path.glob("batch-*")}
    assert len(processes) == actors, "the premise: each actor ran batches (two on one device when sharing)"
    method = Runtime.get().load_program(example_program(), device="cuda").load_method("forward")
    for row, logits in zip(tokens, out["output_0"]):
        expected = method.execute([torch.from_numpy(row[None]).cuda()])[0][0].cpu().numpy()
        torch.testing.assert_close(np.asarray(logits), expected)
