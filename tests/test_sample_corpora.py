"""The tiny profile's sample corpora are a function of the code alone: rebuilt in two fresh interpreters they are
byte-identical to each other and to the committed files (nothing from the process, such as an object's address)."""
import subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = ('tulu_sample.jsonl', 'smoltalk_sample.jsonl', 'ultrafeedback_sample.jsonl')


def build(out: Path) -> dict[str, bytes]:
    subprocess.run([sys.executable, '-c', f"from rsi_repro.tiny import build_sample_corpora; build_sample_corpora({str(out)!r})"],
                   check=True, cwd=ROOT)
    return {f: (out / f).read_bytes() for f in FILES}


def test_a_rebuild_of_the_sample_corpora_is_byte_identical_twice(tmp_path):
    first, second = build(tmp_path / 'a'), build(tmp_path / 'b')
    assert first == second


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="data/corpora was built from Python 3.11's standard library "
                    "(its docstrings and signatures are the corpora's text); another Python's rebuild differs")
def test_the_committed_sample_corpora_are_what_the_code_builds(tmp_path):
    first = build(tmp_path / 'a')
    committed = {f: (ROOT / 'data/corpora' / f).read_bytes() for f in FILES}
    assert [f for f in FILES if first[f] != committed[f]] == [], "data/corpora differs from what build_sample_corpora writes"
