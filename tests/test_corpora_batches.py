"Corpus bands are read in batches (slices of the `datasets` table, parquet record batches), with the same rows, in the same order, as one lookup per row."
import json
from pathlib import Path

import pytest

from rsi_repro.config import Band, Corpus
from rsi_repro.corpora import CorpusError, iter_band, read_band


def _row(i):
    return {"id": f"r{i}", "messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}],
            "source": "s" if i % 2 else "t"}


@pytest.fixture
def dataset_folder(tmp_path, monkeypatch):
    "A local dataset folder of 10,000 rows in two parquet shards, loaded by `datasets` as a hub id is."
    import datasets, pyarrow as pa, pyarrow.parquet as pq
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    d = tmp_path / "tulu" / "data"; d.mkdir(parents=True)
    for k, (a, b) in enumerate(((0, 6000), (6000, 10000))):
        pq.write_table(pa.Table.from_pylist([_row(i) for i in range(a, b)]), d / f"train-0000{k}-of-00002.parquet")
    return tmp_path / "tulu"


@pytest.fixture
def lookups(monkeypatch):
    "Every key `datasets.Dataset.__getitem__` is called with."
    import datasets
    seen, orig = [], datasets.Dataset.__getitem__
    def spy(self, key):
        seen.append(key); return orig(self, key)
    monkeypatch.setattr(datasets.Dataset, "__getitem__", spy)
    return seen


def test_a_dataset_band_is_read_by_slices_with_the_rows_a_per_row_read_gives(dataset_folder, lookups):
    corpus = Corpus("tulu", str(dataset_folder))
    rows = read_band(corpus, Band(1000, 9500))
    assert all(isinstance(k, slice) for k in lookups), "a row was looked up on its own"
    assert len(lookups) == 3                              # 8,500 rows in batches of 4,096
    assert [r["_row"] for r in rows] == list(range(1000, 9500))
    assert rows[0] == {**_row(1000), "_row": 1000} and rows[-1] == {**_row(9499), "_row": 9499}
    assert rows[5000 - 1000] == {**_row(5000), "_row": 5000}   # across the shard border at 6,000 too
    assert rows[6000 - 1000] == {**_row(6000), "_row": 6000}


def test_a_band_past_the_dataset_end_is_refused_before_a_row_is_read(dataset_folder, lookups):
    with pytest.raises(CorpusError, match=r"band \[9000, 10001\) asks for rows past its end \(it has 10000\)"):
        next(iter_band(Corpus("tulu", str(dataset_folder)), Band(9000, 10001)))
    assert lookups == []


@pytest.mark.parametrize("band", [Band(0, 7), Band(2, 9), Band(3, 4), Band(5, 10)])
def test_parquet_and_jsonl_files_give_the_same_rows_by_batches(tmp_path, band):
    import pyarrow as pa, pyarrow.parquet as pq
    rows = [_row(i) for i in range(10)]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet", row_group_size=4)
    want = [{**rows[i], "_row": i} for i in range(band.start, band.stop)]
    for name in ("c.jsonl", "c.parquet"):
        batches = list(iter_band(Corpus("c", str(tmp_path / name)), band, batch_rows=3))
        assert [{k: v for k, v in r.items() if k != "_line"} for b in batches for r in b] == want, name   # JSONL rows carry their line too
        if name == "c.jsonl": assert [r["_line"] for b in batches for r in b] == [i + 1 for i in range(band.start, band.stop)]
        assert all(0 < len(b) <= 3 for b in batches), name


@pytest.mark.parametrize("name", ["c.jsonl", "c.parquet"])
def test_a_band_past_a_file_end_names_the_rows_it_has(tmp_path, name):
    import pyarrow as pa, pyarrow.parquet as pq
    rows = [_row(i) for i in range(10)]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet", row_group_size=4)
    for band in (Band(8, 12), Band(11, 12)):
        with pytest.raises(CorpusError, match=rf"corpus c .*band \[{band.start}, 12\) asks for rows past its end \(it has 10\)"):
            read_band(Corpus("c", str(tmp_path / name)), band)


def test_read_band_leaves_the_garbage_collector_as_it_found_it(dataset_folder):
    import gc
    corpus = Corpus("tulu", str(dataset_folder))
    assert gc.isenabled()
    assert len(read_band(corpus, Band(0, 10))) == 10 and gc.isenabled()
    with pytest.raises(CorpusError): read_band(corpus, Band(0, 10_001))
    assert gc.isenabled()
    gc.disable()
    try:
        read_band(corpus, Band(0, 10))
        assert not gc.isenabled()
    finally:
        gc.enable()
