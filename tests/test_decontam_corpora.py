"""Math decontamination searches every corpus the run trains on (stage-1 bands, the DPO pairs, the repair mix, each round
mix an arm uses): a problem planted in any one of them is dropped and attributed to that corpus, and the record lists
every corpus searched with its hits."""
import dataclasses, json
from pathlib import Path

import pytest

from rsi_repro.config import load_profile
from rsi_repro.evals import read_evals
from rsi_repro.corpora import write_sft_mix
from rsi_repro.generate import load_tokenizer
from rsi_repro.eval_plan import model_ref
from rsi_repro.eval_plan import math_inputs, training_corpora
from rsi_repro.instruments.math import math_problems
from rsi_repro.io import write_jsonl
from rsi_repro.layout import repair_mix_path, round_mix_path
from rsi_repro.trained_on import RECORD, read_decontam_record

ROOT = Path(__file__).resolve().parents[1]
WORDS = ('harbor lantern copper meadow violet thunder pebble orchard saddle quartz ribbon falcon marble cedar '
         'glacier nutmeg walnut canyon basalt clover').split()


def passage(k: int, n: int = 40) -> str:
    "A passage of n words that no other passage shares a run of words with (its own rotation and stride)."
    return ' '.join(WORDS[(k * 7 + i * (k + 1)) % len(WORDS)] + str(i % 10) for i in range(n))


def chat(user, answer): return [{'role': 'user', 'content': user}, {'role': 'assistant', 'content': answer}]


@pytest.fixture(scope='module')
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('decontam')
    base = load_profile(ROOT / 'configs/tiny.yaml')
    P = {kind: passage(k) for k, kind in enumerate(['sft', 'dpo', 'repair', 'single', 'double', 'audit', 'nowhere'])}
    sft = tmp / 'sft.jsonl'
    write_jsonl(sft, [{'messages': chat(f'Tell me about row {i}.', f'Row {i} is ordinary.')} for i in range(2)] +
                     [{'messages': chat(f"Please read: {P['sft']}", 'Done.')}])
    dpo = tmp / 'dpo.jsonl'
    write_jsonl(dpo, [{'prompt': f'Question {i}?', 'chosen': f'A good answer {i}.', 'rejected': f'A poor answer {i}.'} for i in range(2)] +
                     [{'prompt': 'Which is better?', 'chosen': 'The first.', 'rejected': f"The second: {P['dpo']}"},
                      {'prompt': 'Held out?', 'chosen': 'Yes.', 'rejected': f"Audit only: {P['audit']}"}])   # row 3: the audit band
    profile = dataclasses.replace(
        base, root=str(tmp), run='decontam',
        base=dataclasses.replace(base.base, name_or_path=str(ROOT / 'data/tiny_base')),
        sft=dataclasses.replace(base.sft, corpora=(dataclasses.replace(base.sft.corpora[0], source=str(sft), bands=(
            dataclasses.replace(base.sft.corpora[0].bands[0], start=0, stop=3),)),)),
        dpo=dataclasses.replace(base.dpo, corpus=dataclasses.replace(base.dpo.corpus, source=str(dpo), bands=(
            dataclasses.replace(base.dpo.corpus.bands[0], start=0, stop=3),)), audit=dataclasses.replace(base.dpo.audit, start=3, stop=4)),
        evals=read_evals({'math': {'sources': [{'source': str(tmp / 'math.jsonl'), 'kind': 'prompt_set'}]}}))
    tok = load_tokenizer(model_ref(profile))
    mixes = {'repair': repair_mix_path(profile.run_dir / 'repair'),
             'single': round_mix_path(profile.run_dir / 'rounds', 'r6', 'single'),
             'double': round_mix_path(profile.run_dir / 'rounds', 'r6', 'double')}
    for kind, path in mixes.items():
        write_sft_mix([(f'{kind}-0', chat('Write something.', 'Nothing here.')), (f'{kind}-1', chat('Write more.', P[kind]))],
                      tok, 512, path)
    write_jsonl(tmp / 'math.jsonl', [{'id': f'in-{k}', 'family': 'free', 'question': f'Consider this: {v} How many words?',
                                      'answer': '#### 40'} for k, v in P.items()])
    kept, dropped = math_problems(math_inputs(profile), tmp / 'eval' / 'math_problems', 'tiny', lambda: tok)
    return profile, tmp / 'eval' / 'math_problems', kept, dropped


def test_a_planted_overlap_in_each_corpus_is_found_and_attributed_to_it(run):
    profile, cache, kept, dropped = run
    got = dict(zip(dropped.id, dropped.corpus))
    assert got == {'in-sft': 'tulu3', 'in-dpo': 'ultrafeedback', 'in-repair': 'repair:sampling/mix_x1.npz',
                   'in-single': 'rounds:mixes/r6/mix_x1.npz', 'in-double': 'rounds:mixes/r6/mix_x2.npz'}
    # the DPO audit band is never trained on, so a problem found only there is kept; so is one found nowhere
    assert sorted(kept.id) == ['in-audit', 'in-nowhere']
    rows = dict(zip(dropped.id, dropped.corpus_row))
    assert rows['in-sft'] == 2 and rows['in-dpo'] == 2 and rows['in-repair'] == 'repair-1' and rows['in-double'] == 'double-1'


def test_the_record_lists_every_corpus_searched_with_its_hits(run):
    profile, cache, kept, dropped = run
    rec = read_decontam_record(cache).set_index('corpus')
    assert list(rec.index) == [c.name for c in training_corpora(profile)]
    assert rec['kind'].to_dict() == {'tulu3': 'sft', 'ultrafeedback': 'dpo', 'repair:sampling/mix_x1.npz': 'mix',
                                     'rounds:mixes/r6/mix_x1.npz': 'mix', 'rounds:mixes/r6/mix_x2.npz': 'mix'}
    assert rec['dropped'].tolist() == [1, 1, 1, 1, 1] and (rec['problems'] == 1).all()
    assert rec['documents'].tolist() == [3, 3, 2, 2, 2] and (rec['tokens'] > 0).all()
    raw = json.loads((cache / RECORD).read_text())
    assert raw[2]['spec']['sha256'] and raw[1]['spec']['seed'] == profile.dpo.optim.seed


def test_a_mix_the_profile_trains_on_that_is_missing_stops_the_math_set(run, tmp_path):
    profile, *_ = run
    missing = dataclasses.replace(profile, run='no-mixes')
    with pytest.raises(FileNotFoundError, match='run the repair stage first'):
        math_problems(math_inputs(missing), tmp_path / 'math_problems', 'tiny', lambda: None)
