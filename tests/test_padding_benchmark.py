"""benchmarks/padding.py: the padding each row order leaves, computed from the library's own sampler; grouping over more
steps pads less, and a hand-made case gives the figure by hand."""
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def padding_module():
    spec = importlib.util.spec_from_file_location('padding_bench', ROOT / 'benchmarks' / 'padding.py')
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod


def test_padding_by_hand():
    pb = padding_module()
    # two steps of 4 rows, micro-batches of 2, padded to a multiple of 4: [3, 9] -> 2 x 12, [5, 4] -> 2 x 8, [1] -> 4
    lengths = [3, 9, 5, 4, 1]
    assert abs(pb.padding_fraction(lengths, [[0, 1, 2, 3, 4]], 2, 4, 4) - (1 - 22 / 44)) < 1e-12


def test_grouping_over_steps_pads_less(tmp_path, monkeypatch):
    pb = padding_module()
    out = tmp_path / 'padding.json'
    monkeypatch.setattr(sys, 'argv', ['padding.py', '--sources', 'synthetic', 'tulu_sample', '--splits', '8x6', '24x2',
                                      '--steps', '1', '8', '--epochs', '2', '--out', str(out)])
    pb.main()
    doc = json.loads(out.read_text())
    for name, src in doc['sources'].items():
        fr = {(r['order'], r['split']): r['padding_fraction'] for r in src['results']}
        for split in ('8x6', '24x2'):
            assert fr[('steps_8', split)] < fr[('steps_1', split)] < fr[('random', split)], (name, split)
        assert fr[('steps_1', '8x6')] < fr[('steps_1', '24x2')]       # a larger micro-batch pads more
    assert doc['sources']['synthetic']['rows'] == 480 and doc['sources']['tulu_sample']['rows'] > 0
