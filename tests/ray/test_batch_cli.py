"""`pterun batch` end to end, on the session's Ray cluster: a Parquet file (a bad row recorded, then refused)
and a folder of images compared with the eager model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import torch
from typer.testing import CliRunner

from pterun import Runtime
from pterun.cli.main import app
from pterun.ray.sources import ImageFormat
from tests.ray.programs import STATIC_BATCH, dynamic_mlp, static_classifier

runner = CliRunner()


def test_a_parquet_file_in_order_with_a_bad_row_recorded_then_refused(ray_cluster, tmp_path, monkeypatch):
    program = dynamic_mlp()
    # Relative paths are the caller's, though Ray's workers run in another working directory.
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((20, 6)).astype(np.float32), rng.standard_normal((20, 3)).astype(np.float32)
    rows = list(x)
    rows[13] = np.ones(7, np.float32)  # one value too many
    pd.DataFrame({"x": rows, "y": list(y)}).to_parquet(tmp_path / "in.parquet", row_group_size=6)
    assert pq.ParquetFile(tmp_path / "in.parquet").num_row_groups == 4, "the premise: several row groups"
    args = ["batch", str(program.pte), "-i", "in.parquet", "--batch-size", "5", "--workers", "1"]

    result = runner.invoke(app, args + ["-o", "out", "--preserve-order", "--on-error", "record"])
    assert result.exit_code == 0, result.output
    assert "1 rows failed" in result.stdout and "20 rows in" in result.stdout and "rows/s" in result.stdout
    out = pq.read_table(tmp_path / "out").to_pandas()
    assert out["row"].tolist() == list(range(20))
    assert out["error"].notna().tolist() == [r == 13 for r in range(20)]
    assert out["error"][13].startswith("row 13, input 0 (column 'x'): shape [7] is past the upper bound [6]")
    method = Runtime.get().load_program(program.pte).load_method("forward")
    good = [r for r in range(20) if r != 13]
    expected = method.execute([torch.from_numpy(x[good[:8]]), torch.from_numpy(y[good[:8]])])[0]
    torch.testing.assert_close(np.stack(out["output_0"][good[:8]]), expected.numpy())

    refused = runner.invoke(app, args + ["-o", "refused"])
    assert refused.exit_code == 1 and refused.output.count("error:") == 1 and "Traceback" not in refused.output
    assert "row 13, input 0 (column 'x')" in refused.output and "NotSupported 0x10" in refused.output


def test_a_folder_of_images_compared_with_the_eager_model(ray_cluster, tmp_path):
    from PIL import Image

    program = static_classifier()
    folder = tmp_path / "images"
    folder.mkdir()
    pixels = np.random.default_rng(4).integers(0, 256, (6, 10, 12, 3), dtype=np.uint8)
    for i, image in enumerate(pixels):
        Image.fromarray(image).save(folder / f"{i}.png")

    result = runner.invoke(app, ["batch", str(program.pte), "-i", str(folder), "-o", str(tmp_path / "out"),
                                 "--compare-with", "tests.ray.programs:small_cnn", "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "agrees: 6 of 6 rows (100.00%)" in result.stdout and "max_abs_error p50" in result.stdout
    assert "6 rows in" in result.stdout
    out = pq.read_table(tmp_path / "out").to_pandas().sort_values("row")
    assert out["path"].tolist() == [str(folder / f"{i}.png") for i in range(6)]
    assert out["agrees"].all()
    # The same decoding (resized to 8 x 8, channels first, scaled to [0, 1]) through the method directly.
    decode = ImageFormat((3, 8, 8), "float32")
    first = np.stack([decode(p) for p in out["path"][:STATIC_BATCH]])
    assert first.shape == (4, 3, 8, 8) and 0 <= first.min() and first.max() <= 1
    method = Runtime.get().load_program(program.pte).load_method("forward")
    np.testing.assert_array_equal(np.stack(out["output_0"][:STATIC_BATCH]),
                                  method.execute([torch.from_numpy(first)])[0].numpy())
