"""benchmarks/results/train_speed.json: its `rates` are the library rows of its `summary`, its `summary` is its `runs`, and the
keys are the ones `rsi-repro estimate` asks for, so a hand edit of either side, or a shape renamed on one side, fails here."""
import copy
import importlib.util
import json
from pathlib import Path

from rsi_repro.config import load_profile
from rsi_repro.estimate import rate_keys, read_rates, shape_of

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / 'benchmarks' / 'results'
DOC = json.loads((RESULTS / 'train_speed.json').read_text())


def train_speed():
    "benchmarks/train_speed.py as a module (it imports torch only inside its functions)."
    spec = importlib.util.spec_from_file_location('train_speed', ROOT / 'benchmarks' / 'train_speed.py')
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod


def test_the_rates_are_the_library_rows_tokens_per_s():
    ts = train_speed()
    assert DOC['rates'] == ts.rates_from_summary(DOC['summary'])
    library = [r for r in DOC['summary'] if r['library']]
    for key, rate in DOC['rates'].items():
        shape = [s for s, name in ts.ESTIMATE_SHAPES.items() if key == f'train.sft.{name}']
        assert len(shape) == 1
        rows = [r for r in library if r['shape'] == shape[0]]
        assert rate['value'] == rows[-1]['tokens_per_s'] and rate['unit'] == 'tokens/s'    # the last library run of the shape
        assert f"r={rows[-1]['lora_r']}" in rate['what'] and 'SFT-shaped' in rate['what'] and 'not DPO' in rate['what']
    assert {r['shape'] for r in library} == {'qwen3-moe-30b-a3b', 'nemotron-h-31b'}
    assert {k: v['value'] for k, v in DOC['rates'].items()} == {'train.sft.qwen3_moe-30b-a3b': 11554.6, 'train.sft.nemotron_h-30b-a3b': 10640.9}
    assert not any(k.startswith('train.dpo.') for k in DOC['rates'])      # DPO is not measured there


def test_the_summary_is_the_runs():
    ts = train_speed()
    assert DOC['summary'] == ts.summarise(DOC)
    ours = [r for run in DOC['runs'] for r in run['results'] if r['variant'] == 'ours']
    assert [r['tokens_per_s'] for r in ours] == [r['tokens_per_s'] for r in DOC['summary'] if r['library']]


def test_a_hand_edit_on_either_side_is_seen():
    ts = train_speed()
    edited = copy.deepcopy(DOC)
    edited['rates']['train.sft.nemotron_h-30b-a3b']['value'] = 12000.0
    assert edited['rates'] != ts.rates_from_summary(edited['summary'])
    edited = copy.deepcopy(DOC)
    next(r for r in edited['summary'] if r['library'] and r['shape'] == 'nemotron-h-31b')['tokens_per_s'] = 12000.0
    assert DOC['rates'] != ts.rates_from_summary(edited['summary']) and edited['summary'] != ts.summarise(edited)


def test_the_keys_are_the_ones_the_estimate_asks_for():
    nemotron = load_profile(ROOT / 'configs' / 'nemotron.yaml')
    own = rate_keys(nemotron, shape_of(nemotron))['train.sft']
    stand_in = rate_keys(nemotron, 'qwen3_moe-30b-a3b')['train.sft']
    assert set(DOC['rates']) == {own, stand_in}
    rates = read_rates(RESULTS)
    for key in (own, stand_in):
        assert Path(rates[key].file).name == 'train_speed.json' and rates[key].path == f'rates.{key}'
        assert rates[key].value == DOC['rates'][key]['value']
    assert 'train.dpo.nemotron_h-30b-a3b' not in rates and 'train.dpo.qwen3_moe-30b-a3b' not in rates
