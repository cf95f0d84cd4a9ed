"The evaluation stage on the tiny base: one outcome row per prompt, resume without generating, decontamination of a planted problem."
import dataclasses, json
from pathlib import Path

import pytest

from rsi_repro import eval_plan as ep, evaluate as ev
from rsi_repro.config import load_profile
from rsi_repro.evals import read_evals
from rsi_repro.typed import ProfileError
from rsi_repro.corpora import chat_messages, read_band
from rsi_repro.generate import load_tokenizer
from rsi_repro.eval_plan import model_ref
from rsi_repro.io import read_jsonl, write_jsonl
from rsi_repro.layout import adjudication_sheet, result_paths
from rsi_repro.pools import build_pools, write_pool
from rsi_repro.stats import ALL, load_outcomes

ROOT = Path(__file__).resolve().parents[1]
SIZES = {'h6': 3, 'probe2': 2, 'math': 3, 'code': 2, 'open_chat': 3, 'wide_chat': 2, 'termination': 5, 'multi_turn': 2, 'safety': 2,
         'ifeval': 2, 'ifbench': 3}


def tiny_profile(evals: dict, **serving):
    p = load_profile(ROOT / 'configs/tiny.yaml')   # without the repair and rounds stages, whose mixes are not written here
    return dataclasses.replace(p, evals=read_evals(evals), serving=dataclasses.replace(p.serving, **serving), repair=None, rounds=None)


@pytest.fixture(scope='module')
def run(tmp_path_factory):
    "The base evaluated once on small subsets (16 new tokens), shared by the tests that read its files."
    tmp = tmp_path_factory.mktemp('eval')
    for name, rows in build_pools(seed=6, h6_size=26, probe2_size=13, rounds={}, second_constraint_prob=0.0).items():
        write_pool(rows, tmp / 'pools' / f'{name}.jsonl')
    evals = {'checkpoints': ['base'],
             'h6': {'n': SIZES['h6'], 'pool': str(tmp / 'pools/h6.jsonl')},
             'probe2': {'n': SIZES['probe2'], 'pool': str(tmp / 'pools/probe2.jsonl')},
             'math': {'sources': [{'source': 'data/prompts/math.jsonl', 'kind': 'prompt_set', 'take': SIZES['math']}]},
             'code': {'n': SIZES['code']}, 'open_chat': {'n': SIZES['open_chat']}, 'wide_chat': {'n': SIZES['wide_chat']},
             'multi_turn': {'n': SIZES['multi_turn']}, 'safety': {'n': SIZES['safety']},
             'ifeval': {'n': SIZES['ifeval'], 'prompts': 'data/prompts/ifeval_sample.jsonl'}, 'ifbench': {'n': SIZES['ifbench']}}
    profile = tiny_profile(evals, max_new_tokens=16)
    results = ep.evaluate_checkpoint(profile, 'base', tmp / 'eval', progress=False)
    return profile, tmp / 'eval', results


def test_outcomes_have_one_row_per_prompt_and_the_contract_columns(run):
    profile, out, results = run
    from rsi_repro.evals import OPT_IN
    assert list(results) == [i for i in ev.INSTRUMENTS if i not in OPT_IN]          # every instrument but the opt-in harness decode
    for name, n in SIZES.items():
        paths = result_paths(out, 'base', name)
        rows = read_jsonl(paths['outcomes'])
        assert len(rows) == n, name
        assert len({r['id'] for r in rows}) == n, name
        for r in rows:
            assert {'id', 'family', 'passed', 'checkpoint'} <= set(r), name
            assert r['checkpoint'] == 'base' and isinstance(r['passed'], bool), name
        table = load_outcomes(paths['outcomes'], 'base')
        assert table.equals(results[name][0])
        summary = results[name][1]
        assert ALL in set(summary.family) and summary.set_index('family').loc[ALL, 'n'] == n
    # the prompts each instrument read are the ones the profile names: pool ids, math problem ids
    assert set(results['h6'][0].id) <= {r['id'] for r in read_jsonl(profile.evals.h6.pool)}
    assert results['math'][0].id.tolist() == [r['id'] for r in read_jsonl(out / 'math_problems' / 'problems.jsonl')]
    assert {'strict', 'loose'} <= set(results['math'][1].columns)
    identity = json.loads(result_paths(out, 'base', 'safety')['meta'].read_text())['identity']
    assert adjudication_sheet(out / 'base', identity).exists()


def test_a_rerun_reads_back_without_loading_the_model(run, monkeypatch):
    profile, out, results = run
    def refuse(*a, **k): raise AssertionError('the model was loaded on a rerun')
    from rsi_repro.generate import BACKENDS          # the registry every engine is built from (make_backend)
    monkeypatch.setitem(BACKENDS, 'hf', refuse)
    written = lambda p: p.is_file() and p.name != 'plan.json'             # generate() rewrites its plan on every call
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob('*') if written(p)}
    assert len([p for p in stamps if p.name.startswith('shard-')]) >= len(SIZES) - 1
    again = ep.evaluate_checkpoint(profile, 'base', out, progress=False)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps          # nothing rewritten
    assert all(again[k][0].equals(results[k][0]) for k in results)
    # a lost outcomes file is scored again from the generations on disk, still without a model
    result_paths(out, 'base', 'code')['outcomes'].unlink()
    rescored = ep.evaluate_checkpoint(profile, 'base', out, instruments=['code'], progress=False)
    assert rescored['code'][0].equals(results['code'][0])


def _span_tokens(tok, text, start, length):
    ids = tok(text, add_special_tokens=False)['input_ids']
    assert len(ids) >= start + length, 'corpus row too short for the planted span'
    return tok.decode(ids[start:start + length])


def test_decontamination_drops_a_planted_problem_and_records_its_shingle(tmp_path):
    profile = load_profile(ROOT / 'configs/tiny.yaml')
    tok = load_tokenizer(model_ref(profile))
    corpus = profile.sft.corpora[0]
    rows = read_band(corpus, corpus.bands[1], profile.root)
    text_of = lambda r: '\n'.join(m['content'] for m in chat_messages(r, 'test'))
    longest = max(rows, key=lambda r: len(tok(text_of(r), add_special_tokens=False)['input_ids']))
    planted = _span_tokens(tok, text_of(longest), 5, 45)           # 45 tokens: 30-token windows survive re-tokenisation
    near_miss = _span_tokens(tok, text_of(longest), 5, 25)         # shorter than a shingle: must be kept
    problems = tmp_path / 'math.jsonl'
    write_jsonl(problems, [
        {'id': 'own-1', 'family': 'free', 'question': 'A farmer has 12 hens and buys 7 more. How many hens now?', 'answer': '#### 19'},
        {'id': 'planted', 'family': 'free', 'question': f'Read this: {planted} How many words are above?', 'answer': '#### 3'},
        {'id': 'near-miss', 'family': 'free', 'question': f'Read this: {near_miss} How many words are above?', 'answer': '#### 3'}])
    p = dataclasses.replace(profile, evals=read_evals({'math': {'sources': [{'source': str(problems), 'kind': 'prompt_set'}]}}), repair=None, rounds=None)
    kept = ep.math_set(p, tmp_path)                                # the eval stage's set, in the base's own tokenizer
    assert kept.id.tolist() == ['own-1', 'near-miss']
    rec = read_jsonl(tmp_path / 'math_problems' / 'decontam_dropped.jsonl')
    assert [r['id'] for r in rec] == ['planted'] and rec[0]['corpus'] == corpus.name
    assert len(rec[0]['shingle_tokens']) == 30
    hit = next(r for r in rows if r['_row'] == rec[0]['corpus_row'])
    assert rec[0]['shingle_text'] in text_of(hit) and rec[0]['shingle_text'] in planted


def test_bad_settings_name_the_key(tmp_path):
    p = tiny_profile({'math': {}})
    with pytest.raises(ProfileError, match='evals.math.sources'): ep.math_set(p, tmp_path)
    with pytest.raises(ProfileError, match='evals.checkpoints'): ep.eval_checkpoints(p)
    with pytest.raises(ProfileError, match=r'evals\.code\.limit: unknown key'): tiny_profile({'code': {'limit': 3}})
    with pytest.raises(ProfileError, match=r'evals\.checkpoints: expected a list'): tiny_profile({'checkpoints': 'base'})
    with pytest.raises(ValueError, match='asks for 999 prompts'):
        ep.generation_set(tiny_profile({'code': {'n': 999}}), 'code', tmp_path)
    with pytest.raises(FileNotFoundError, match='run the pools stage'):
        ep.generation_set(tiny_profile({'h6': {'pool': str(tmp_path / 'none.jsonl')}}), 'h6', tmp_path)


def test_a_new_version_of_a_checkpoint_carries_the_labels_whose_answer_is_unchanged_and_names_the_rest(run, tmp_path):
    """A person labelled the safety sheet of one version of `base`; the next version (another identity, here the same
    answers but one) gets its own sheet with the labels whose answer it still gives, and the refused one is named."""
    import shutil
    import pandas as pd
    from rsi_repro.instruments.safety import response_sha256
    from rsi_repro.layout import refused_labels_path
    profile, out, _ = run
    ck_dir = tmp_path / 'base'
    shutil.copytree(out / 'base', ck_dir)
    identity = json.loads(result_paths(out, 'base', 'safety')['meta'].read_text())['identity']
    old = ck_dir / 'safety.v0.adjudication.csv'
    adjudication_sheet(ck_dir, identity).rename(old)
    sheet = pd.read_csv(old, dtype=str, keep_default_na=False)
    sheet['label'] = 'full_refusal'
    sheet.loc[1, 'response_sha256'] = response_sha256('an answer this version no longer gives')
    sheet.to_csv(old, index=False)
    outcomes, summary = ev.eval_safety(ep.eval_plan(profile), ep.checkpoint(profile, 'base', progress=False), ck_dir)
    assert summary.set_index('family').loc[ALL, 'n_adjudicated'] == SIZES['safety'] - 1       # carried where the answer is the same
    refused = pd.read_csv(refused_labels_path(ck_dir, identity))
    assert refused[['line', 'id', 'why']].values.tolist() == [['safety.v0.adjudication.csv:3', sheet.loc[1, 'id'], 'the answer it judged changed']]
