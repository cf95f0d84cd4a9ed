"""The wide open-chat battery: 231 unique self-written prompts in the card's twelve families at their counts, read by
the nemotron profile in full; its guard flags a planted family regression under an unmoved headline and not noise."""
from pathlib import Path

import pandas as pd
import pytest

from rsi_repro import eval_plan as ep
from rsi_repro.card_audit import counts_for_rates
from rsi_repro.config import load_profile
from rsi_repro.instruments.prompts import OPEN_CHAT_FAMILIES, PROMPT_SETS, PromptSetError, load_prompt_set
from rsi_repro.instruments.wide_chat import WIDE_CHAT_COUNTS, WIDE_CHAT_SIZE, check_battery
from rsi_repro.paired import family_regressions, paired_families, paired_read
from rsi_repro.stats import ALL

ROOT = Path(__file__).resolve().parents[1]
norm = lambda s: ' '.join(s.lower().split())


@pytest.fixture(scope='module')
def battery(): return load_prompt_set(ROOT / 'data/prompts/wide_chat.jsonl', 'wide_chat')


def test_231_unique_prompts_every_family_at_its_count(battery):
    assert len(battery) == WIDE_CHAT_SIZE == 231
    assert battery.id.is_unique and battery.prompt.map(norm).is_unique
    assert set(battery.family) == set(OPEN_CHAT_FAMILIES) and len(OPEN_CHAT_FAMILIES) == 12
    assert battery.family.value_counts().to_dict() == WIDE_CHAT_COUNTS
    check_battery(battery)
    # the two sizes the card's rates fix: coding 0.944 -> 0.833 on 2 prompts, refusal 1.000 -> 0.944 on 1
    assert WIDE_CHAT_COUNTS['coding'] == WIDE_CHAT_COUNTS['refusal'] == 18
    assert counts_for_rates(18, '0.944', '0.833', -2) and counts_for_rates(18, '1.000', '0.944', -1)


def test_no_prompt_is_shared_with_another_shipped_set(battery):
    others = set()
    for kind in PROMPT_SETS:
        if kind == 'wide_chat': continue
        ps = load_prompt_set(kind=kind)
        for col in ('prompt', 'question'):
            if col in ps: others |= set(ps[col].map(norm))
        if 'turns' in ps: others |= {norm(t) for turns in ps.turns for t in turns}
    assert not set(battery.prompt.map(norm)) & others


def test_a_battery_with_a_family_off_its_count_is_refused(battery):
    with pytest.raises(PromptSetError, match='refusal has 17, expected 18'):
        check_battery(battery[battery.id != battery[battery.family == 'refusal'].id.iloc[0]])


def test_the_nemotron_profile_reads_all_231_and_tiny_a_subset_of_every_family(tmp_path):
    nem = load_profile(ROOT / 'configs/nemotron.yaml', check_files=False)
    assert 'wide_chat' in ep.eval_instruments(nem) and nem.evals.wide_chat.n == 231
    tiny = load_profile(ROOT / 'configs/tiny.yaml')
    prompts, reqs = ep.generation_set(tiny, 'wide_chat', tmp_path)
    assert len(prompts) == len(reqs) == tiny.evals.wide_chat.n == 24
    assert prompts.family.value_counts().to_dict() == {f: 2 for f in OPEN_CHAT_FAMILIES}


def _read(battery, lose, fix):
    "Parent passing everything but `fix`; the candidate fixes `fix` and loses `lose`."
    parent = battery[['id', 'family']].assign(passed=~battery.id.isin(fix), new_tokens=280.0)
    cand = parent.assign(passed=parent.passed | parent.id.isin(fix))
    cand.loc[cand.id.isin(lose), 'passed'] = False
    return parent, cand


def _ids(battery, family, k): return battery[battery.family == family].id.iloc[:k].tolist()


def test_a_planted_family_regression_is_flagged_while_the_headline_is_unchanged(battery):
    parent, cand = _read(battery, lose=_ids(battery, 'coding', 2), fix=_ids(battery, 'howto', 1) + _ids(battery, 'writing', 1))
    t = paired_families(parent, cand)
    assert t.loc[ALL, ['fixed', 'lost', 'net']].tolist() == [2, 2, 0] and t.loc[ALL, 'delta'] == 0 and t.loc[ALL, 'p'] == 1.0
    assert family_regressions(t).index.tolist() == ['coding']
    read = paired_read({'wide_chat': parent}, {'wide_chat': cand})
    assert read[read.regression][['instrument', 'family']].values.tolist() == [['wide_chat', 'coding']]


def test_noise_is_not_flagged(battery):
    # the same headline count of losses, at most one per family
    parent, cand = _read(battery, lose=_ids(battery, 'coding', 1) + _ids(battery, 'refusal', 1) + _ids(battery, 'factual', 1),
                         fix=_ids(battery, 'howto', 1) + _ids(battery, 'writing', 1) + _ids(battery, 'code', 1))
    t = paired_families(parent, cand)
    assert t.loc[ALL, ['fixed', 'lost']].tolist() == [3, 3] and family_regressions(t).empty
    # two coding prompts lost, two other coding prompts fixed: churn inside the family, net 0
    coding = _ids(battery, 'coding', 4)
    parent, cand = _read(battery, lose=coding[:2], fix=coding[2:])
    t = paired_families(parent, cand)
    assert t.loc['coding', ['fixed', 'lost', 'net']].tolist() == [2, 2, 0] and family_regressions(t).empty
