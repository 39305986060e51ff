"""``perfmodel.measurements``' table file: written and read back, older tables, bad rows."""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

import pytest

from perfmodel.errors import ModelFileError
from perfmodel.measurements import Measurement, read_table, write_table

ROW = Measurement(
    source="gavel",
    model="resnet50",
    dataset="imagenet",
    batch_size=64,
    gpu_type="V100",
    num_gpus=2,
    num_nodes=1,
    gpus_per_node=8,
    interconnect="nvlink",
    network_gbps=100.0,
    iters_per_s=3.5,
    precision="fp16",
    seq_len=128,
    micro_batch=4,
    activation_checkpointing=True,
    licence="MIT",
)


def _write_csv(path: Path, rows: list[list[str]]) -> None:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    path.write_bytes(gzip.compress(buf.getvalue().encode()))


def test_round_trip_keeps_every_field_and_type(tmp_path: Path) -> None:
    path = tmp_path / "t.csv.gz"
    write_table([ROW, ROW], path)
    back = read_table(path)
    assert back == [ROW, ROW]
    assert back[0].activation_checkpointing is True and isinstance(back[0].seq_len, int)


def test_a_table_without_the_later_columns_takes_their_defaults(tmp_path: Path) -> None:
    path = tmp_path / "old.csv.gz"
    cols = ["source", "model", "dataset", "batch_size", "gpu_type", "num_gpus", "num_nodes", "gpus_per_node",
            "interconnect", "network_gbps", "iters_per_s"]  # fmt: skip
    _write_csv(
        path, [cols, ["gavel", "resnet50", "imagenet", "64", "V100", "2", "1", "8", "nvlink", "100", "3.5"]]
    )
    (m,) = read_table(path)
    assert m.precision == "fp32" and m.seq_len == 0 and m.activation_checkpointing is False
    assert m.iters_per_s == 3.5 and m.num_gpus == 2


@pytest.mark.parametrize(
    ("cols", "row", "needle"),
    [
        (["source", "model"], ["gavel", "resnet50"], "line 2: bad row ('dataset')"),
        (["source", "model", "dataset", "batch_size", "gpu_type", "num_gpus", "num_nodes", "gpus_per_node",
          "interconnect", "network_gbps", "iters_per_s"],
         ["gavel", "resnet50", "imagenet", "sixty-four", "V100", "2", "1", "8", "nvlink", "100", "3.5"],
         "line 2: bad row"),
    ],
)  # fmt: skip
def test_bad_rows_name_the_file_and_line(
    tmp_path: Path, cols: list[str], row: list[str], needle: str
) -> None:
    path = tmp_path / "bad.csv.gz"
    _write_csv(path, [cols, row])
    with pytest.raises(ModelFileError) as err:
        read_table(path)
    assert needle in str(err.value) and str(path) in str(err.value)


def test_short_and_long_rows_read_as_before(tmp_path: Path) -> None:
    """A row with fewer cells than the header takes the defaults of its missing optional columns; one
    with more has its extra cells ignored; a short row missing a required cell is a bad row."""
    path = tmp_path / "ragged.csv.gz"
    cols = ["source", "model", "dataset", "batch_size", "gpu_type", "num_gpus", "num_nodes", "gpus_per_node",
            "interconnect", "network_gbps", "iters_per_s", "precision", "seq_len"]  # fmt: skip
    base = ["gavel", "resnet50", "imagenet", "64", "V100", "2", "1", "8", "nvlink", "100", "3.5"]
    _write_csv(path, [cols, base, [*base, "fp16", "128", "surplus"]])
    short, long = read_table(path)
    assert (short.precision, short.seq_len) == ("fp32", 0)
    assert (long.precision, long.seq_len) == ("fp16", 128)
    _write_csv(path, [cols, base[:5]])
    with pytest.raises(ModelFileError, match=r"line 2: bad row \('num_gpus'\)"):
        read_table(path)
