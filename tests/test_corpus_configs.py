"A corpus can name a dataset config and split: read from a local two-config dataset (no network), set in the profiles."
import json
from pathlib import Path

import pytest

from rsi_repro.config import Band, Corpus, load_profile
from rsi_repro.corpora import CorpusError, read_band

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def two_configs(tmp_path, monkeypatch):
    "A local dataset folder declaring configs `all` (5 rows, splits train/test) and `short` (2 rows), as hub datasets do."
    import datasets
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    d = tmp_path / "smol"
    for cfg, split, k in (("all", "train", 5), ("all", "test", 3), ("short", "train", 2)):
        (d / cfg).mkdir(parents=True, exist_ok=True)
        (d / cfg / f"{split}.jsonl").write_text("".join(json.dumps({"messages": [
            {"role": "user", "content": f"{cfg}/{split} q{i}"}, {"role": "assistant", "content": f"a{i}"}]}) + "\n" for i in range(k)))
    (d / "README.md").write_text(
        "---\nconfigs:\n"
        "- config_name: all\n  data_files:\n  - split: train\n    path: all/train.jsonl\n  - split: test\n    path: all/test.jsonl\n"
        "- config_name: short\n  data_files:\n  - split: train\n    path: short/train.jsonl\n---\n")
    return d


def _first(rows): return [r["messages"][0]["content"] for r in rows]


def test_config_and_split_pick_the_rows(two_configs):
    assert _first(read_band(Corpus("smol", str(two_configs), config="all"), Band(1, 3))) == ["all/train q1", "all/train q2"]
    assert _first(read_band(Corpus("smol", str(two_configs), config="all", split="test"), Band(0, 3)))[-1] == "all/test q2"
    assert _first(read_band(Corpus("smol", str(two_configs), config="short"), Band(0, 2))) == ["short/train q0", "short/train q1"]
    assert [r["_row"] for r in read_band(Corpus("smol", str(two_configs), config="all"), Band(3, 5))] == [3, 4]


@pytest.mark.parametrize("config,split,msg", [
    (None, "train", r"corpus smol .*config None.*all.*short"),        # datasets will not guess between two configs
    ("everything", "train", r"corpus smol .*config 'everything'"),
    ("short", "test", r"corpus smol .*split 'test'.*Unknown split"),
])
def test_a_wrong_config_or_split_names_the_corpus(two_configs, config, split, msg):
    with pytest.raises(CorpusError, match=msg):
        read_band(Corpus("smol", str(two_configs), config=config, split=split), Band(0, 1))


def test_a_config_on_a_plain_file_is_an_error(tmp_path):
    f = tmp_path / "rows.jsonl"
    f.write_text(json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}) + "\n")
    assert len(read_band(Corpus("f", str(f)), Band(0, 1))) == 1
    with pytest.raises(CorpusError, match="corpus f .*config 'all' is set, but the source is a plain file"):
        read_band(Corpus("f", str(f), config="all"), Band(0, 1))


def test_nemotron_reads_smoltalks_all_config():
    sft = load_profile(ROOT / "configs/nemotron.yaml", check_files=False).sft
    smol = {c.name: c for c in sft.corpora}["smoltalk"]
    assert (smol.source, smol.config, smol.split) == ("HuggingFaceTB/smoltalk", "all", "train")
    assert {c.name: c for c in sft.corpora}["tulu3"].config is None
