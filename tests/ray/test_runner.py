"""PteRunner in Ray Data's map_batches gives the outputs of a plain loop over the same rows; a killed actor
is restarted and the output is still whole; a bad row is named, or recorded."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pterun import Runtime
from pterun.errors import ErrorCode, InvalidArgument, NotSupported
from pterun.ray import PteRunner
from pterun.ray.sources import from_arrays
from tests.ray.programs import DYNAMIC_BOUND, STATIC_BATCH, dynamic_mlp, static_classifier


def images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, 8, 8)).astype(np.float32)


def loop(pte, rows: list[list[np.ndarray]], batch: int | None = None) -> list[list[np.ndarray]]:
    """Each row alone through the method: a static batch filled with copies of it, a dynamic batch of one."""
    method = Runtime.get().load_program(pte).load_method("forward")
    outputs = []
    for row in rows:
        args = [torch.from_numpy(np.repeat(x[None], batch or 1, axis=0)) for x in row]
        outputs.append([o[0].numpy() for o in method.execute(args)])
    return outputs


def run(ds, actors: int = 1, **kwargs):
    """The dataset's rows through PteRunner, ordered by their row column, as NumPy columns."""
    import ray

    # One batch in flight per actor: actors take turns rather than the first one up taking all.
    pool = ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1)
    batch_size = kwargs.pop("batch_size", 8)
    out = ds.map_batches(PteRunner, fn_constructor_kwargs=kwargs, batch_size=batch_size, compute=pool,
                         batch_format="numpy").to_pandas()
    return out.sort_values("row").reset_index(drop=True)


def started(directory) -> int:
    """How many actors were made (restarts included)."""
    return len(list(directory.glob("actor-*")))


def workers(directory) -> int:
    """How many processes ran batches."""
    return len({p.name.split("-")[1] for p in directory.glob("batch-*")})


def test_a_static_batch_program_gives_what_a_loop_gives(ray_cluster, tmp_path):
    program = static_classifier()
    x = images(37)  # not a multiple of the batch of 4: the last call is filled up and trimmed
    out = run(from_arrays({"image": x}, rows_per_block=4), actors=2, program=str(program.pte),
              _test_dir=str(tmp_path), _wait_for_actors=2)
    assert workers(tmp_path) == 2, "the premise: two actors shared the rows"
    assert out["row"].tolist() == list(range(37))
    expected = loop(program.pte, [[r] for r in x], batch=STATIC_BATCH)
    np.testing.assert_array_equal(np.stack(out["output_0"]), np.stack([e[0] for e in expected]))
    assert "image" not in out  # input columns are not written back


def test_a_dynamic_batch_program_takes_rows_up_to_its_bound(ray_cluster):
    program = dynamic_mlp()
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((21, 6)).astype(np.float32), rng.standard_normal((21, 3))  # y: float64, cast
    runner = PteRunner(program.pte)
    runner({"x": x[:2], "y": y[:2]})
    assert (runner.layout.batched, runner.layout.bound, runner.layout.pad) == (True, DYNAMIC_BOUND, False)
    # Columns in the other order, mapped by input index; batches of 10 rows are called as 8 + 2.
    out = run(from_arrays({"y": y, "x": x, "label": np.arange(21) % 3}, rows_per_block=10), batch_size=10,
              program=program.pte.read_bytes(), inputs={0: "x", 1: "y"}, outputs=["scores", "norm"])
    expected = loop(program.pte, [[a, b.astype(np.float32)] for a, b in zip(x, y)])
    torch.testing.assert_close(np.stack(out["scores"]), np.stack([e[0] for e in expected]))
    torch.testing.assert_close(out["norm"].to_numpy(), np.stack([e[1] for e in expected]))
    assert out["label"].tolist() == [i % 3 for i in range(21)]  # other columns pass through


def test_an_actor_killed_mid_job_is_restarted_and_no_row_is_lost(ray_cluster, tmp_path):
    program = static_classifier()
    x = images(40, seed=2)
    out = run(from_arrays({"image": x}, rows_per_block=4), batch_size=4, program=str(program.pte),
              _test_dir=str(tmp_path), _exit_on_batch=3)
    assert (tmp_path / "exited").exists(), "the premise: an actor died on its third batch"
    assert started(tmp_path) == 2, "the premise: Ray started the actor again"
    assert out["row"].tolist() == list(range(40))
    expected = loop(program.pte, [[r] for r in x], batch=STATIC_BATCH)
    np.testing.assert_array_equal(np.stack(out["output_0"]), np.stack([e[0] for e in expected]))


def test_a_bad_row_is_named_with_its_input():
    program = static_classifier()
    x = np.empty(3, dtype=object)
    x[0], x[1], x[2] = images(1)[0], np.zeros((3, 8, 9), np.float32), images(1)[0]
    runner = PteRunner(program.pte)
    with pytest.raises(NotSupported) as raised:
        runner({"image": x, "row": np.array([10, 11, 12])})
    assert raised.value.code == ErrorCode.NotSupported
    assert "row 11, input 0 (column 'image')" in str(raised.value)
    assert "expected shape [3, 8, 8] (static), got [3, 8, 9]" in str(raised.value)
    with pytest.raises(InvalidArgument, match=r"row 0 of a batch of 2, input 0 \(column 'image'\): expected Float"):
        runner({"image": np.zeros((2, 3, 8, 8), np.complex64)})


def test_with_on_error_record_a_bad_row_has_nan_outputs_and_its_message():
    program = static_classifier()
    x = np.empty(3, dtype=object)
    x[0], x[1], x[2] = images(1)[0], np.zeros((3, 8, 9), np.float32), images(1, seed=1)[0]
    out = PteRunner(program.pte, on_error="record")({"image": x, "row": np.array([10, 11, 12])})
    assert out["error"][0] is None and out["error"][2] is None
    assert out["error"][1].startswith("row 11, input 0") and "[NotSupported 0x10]" in out["error"][1]
    assert np.isnan(out["output_0"][1]).all() and not np.isnan(out["output_0"][[0, 2]]).any()
    expected = loop(program.pte, [[x[0]], [x[2]]], batch=STATIC_BATCH)
    np.testing.assert_array_equal(out["output_0"][[0, 2]], np.stack([e[0] for e in expected]))
