"Blinded pair reads: the key is applied exactly once, the sheet reveals nothing, the annotator saves and resumes."
import json, re, sys, subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from rsi_repro import pair_read as pr

NAMES = ('stage3-parent-ckpt', 'candidate-v749-ckpt')
PATHS = ('/runs/xyz/repair/adapter', '/runs/xyz/rounds/v749/adapter')
HASHES = ('3f2a9c81d0e4b7a65c1f0e9d8b7a6c5d', 'a1b2c3d4e5f60718293a4b5c6d7e8f90')


def answer_rows(n, passed, salt):
    fams = ('code', 'writing', 'factual')
    return [{'instrument': 'open_chat', 'id': f"p{i:03d}", 'family': fams[i % 3], 'prompt': f"Question {i}?",
             'response': f"{salt} answer to question {i}.", 'passed': bool(p)} for i, p in enumerate(passed)]


def build(first_passed, second_passed, n, seed):
    cands = pr.pair_candidates(answer_rows(len(first_passed), first_passed, 'First'),
                               answer_rows(len(second_passed), second_passed, 'Second'))
    pairs = pr.choose_pairs(cands, n, seed)
    sheet, key = pr.blind(pairs, NAMES, seed)
    return pairs, sheet, key


def label_by_truth(sheet, truth):
    "An oracle annotator: it knows which answer text it prefers (truth: pair text -> 'first'/'second'/'tie'/'both_bad')."
    out = []
    for r in sheet:
        want = truth[r['prompt']]
        if want in ('tie', 'both_bad'): label = want
        else:
            text = f"{'First' if want == 'first' else 'Second'} answer to question {r['prompt'][9:-1]}."
            label = 'A' if r['answer_a'] == text else 'B'
            assert {r['answer_a'], r['answer_b']} >= {text}
        out.append(dict(r, label=label))
    return out


@settings(max_examples=60, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1), n_prompts=st.integers(2, 30))
def test_round_trip_returns_the_original_pairing(data, seed, n_prompts):
    first = data.draw(st.lists(st.booleans(), min_size=n_prompts, max_size=n_prompts))
    second = data.draw(st.lists(st.booleans(), min_size=n_prompts, max_size=n_prompts))
    n = data.draw(st.integers(1, n_prompts))
    pairs, sheet, key = build(first, second, n, seed)
    # unblind(blind(x)) == x
    back = pr.unblind(sheet, key)
    assert {(p['id']): p['answers'] for p in back} == {c.id: {NAMES[0]: c.first, NAMES[1]: c.second} for c in pairs}
    # a person's preferences, expressed about the answers themselves, come back in checkpoint terms
    truth = {c.prompt: data.draw(st.sampled_from(['first', 'second', 'tie', 'both_bad'])) for c in pairs}
    scored = pr.score(label_by_truth(sheet, truth), key)
    want = {'first': NAMES[0], 'second': NAMES[1], 'tie': 'tie', 'both_bad': 'both_bad'}
    by_id = {c.id: c.prompt for c in pairs}
    assert {s['id']: s['preferred'] for s in scored} == {i: want[truth[p]] for i, p in by_id.items()}
    assert all(set(s) >= {'pair', 'id', 'family', 'stratum', 'preferred'} and 'a' not in s and 'b' not in s for s in scored)


def test_a_scorer_that_applies_the_key_twice_fails_the_round_trip():
    "The card's first scorer's bug, re-enacted: the round-trip check above catches it."
    pairs, sheet, key = build([True] * 12, [False] * 6 + [True] * 6, 12, pr.CARD_SEED)
    truth = {c.prompt: 'second' for c in pairs}
    labelled = label_by_truth(sheet, truth)
    once = pr.score(labelled, key)
    twice = [dict(s, preferred={key['pairs'][s['pair']]['a']: key['pairs'][s['pair']]['b'],
                                key['pairs'][s['pair']]['b']: key['pairs'][s['pair']]['a']}.get(s['preferred'], s['preferred'])
                                if key['pairs'][s['pair']]['a'] == NAMES[1] else s['preferred']) for s in once]
    assert all(s['preferred'] == NAMES[1] for s in once)
    assert any(s['preferred'] != NAMES[1] for s in twice)        # swapped rows flip: the bug is visible
    assert pr.tally(once, *NAMES)[NAMES[1]] == 12


def test_sheet_in_checkpoint_terms_is_refused():
    pairs, sheet, key = build([True] * 8, [False] * 8, 8, 3)
    labelled = [dict(r, label=NAMES[i % 2]) for i, r in enumerate(sheet)]
    with pytest.raises(pr.PairReadError, match=r"row 1 \(pair P01\).*already in checkpoint terms"):
        pr.score(labelled, key)
    missing = [dict(r, label='A' if i != 5 else '') for i, r in enumerate(sheet)]
    with pytest.raises(pr.PairReadError, match=r"row 6 \(pair P06\) has no label"):
        pr.score(missing, key)


def test_blind_sheet_reveals_no_checkpoint(tmp_path):
    first = [True, False] * 10
    pairs, sheet, key = build(first, [not x for x in first[:10]] + first[10:], 16, pr.CARD_SEED)
    key['adapters'] = dict(zip(NAMES, PATHS)); key['identities'] = dict(zip(NAMES, HASHES))
    pr.write_blind(sheet, key, tmp_path / 'sheet.csv', tmp_path / 'key.json')
    text = (tmp_path / 'sheet.csv').read_text()
    for secret in (*NAMES, *PATHS, *HASHES, 'stage3', 'v749', 'adapter', 'discordant', 'concordant'):
        assert secret not in text
    assert not re.search(r'\b[0-9a-f]{12,}\b', text)                       # no hash-like strings
    header = text.splitlines()[0].split(',')
    assert header == list(pr.SHEET_COLUMNS) and not any('len' in h or 'token' in h for h in header)
    # the key, a separate file, does hold them
    assert NAMES[0] in (tmp_path / 'key.json').read_text()
    # rows are not in selection order (discordant prompts were selected first)
    strata = [key['pairs'][r['pair']]['stratum'] for r in sheet]
    assert strata != sorted(strata, key=lambda s: s != 'discordant')


def test_row_order_does_not_depend_on_the_side_coins(monkeypatch):
    pairs, sheet, key = build([True] * 20, [False] * 20, 20, 11)
    monkeypatch.setattr(pr, 'side_swaps', lambda n, seed: [True] * n)
    sheet2, key2 = pr.blind(pairs, NAMES, 11)
    assert [key['pairs'][r['pair']]['id'] for r in sheet] == [key2['pairs'][r['pair']]['id'] for r in sheet2]
    assert sum(k['a'] == NAMES[1] for k in key['pairs'].values()) not in (0, 20)   # the real coins do vary


def test_card_seed_swaps_are_reproducible():
    assert pr.side_swaps(40) == pr.side_swaps(40, 20261005)
    out = subprocess.run([sys.executable, '-c', 'from rsi_repro.pair_read import side_swaps, row_order; print(side_swaps(40), row_order(40))'],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"{pr.side_swaps(40)} {pr.row_order(40)}"        # another process, another hash seed: same draws


def test_widget_saves_every_click_and_resumes_headless(tmp_path):
    pytest.importorskip('ipywidgets')
    pairs, sheet, key = build([True] * 6, [False] * 6, 6, 5)
    pr.write_blind(sheet, key, tmp_path / 'sheet.csv', tmp_path / 'key.json')
    ann = pr.Annotator(tmp_path / 'sheet.csv', annotator='reader')
    ann.buttons['A'].click()
    assert [r['label'] for r in pr.read_sheet(tmp_path / 'sheet.csv')] == ['A', '', '', '', '', '']
    ann.note.value = 'B is complete'; ann.buttons['B'].click()
    ann.buttons['both_bad'].click()
    del ann                                                                 # the session ends
    again = pr.Annotator(tmp_path / 'sheet.csv', annotator='reader')
    assert again.index == 3 and again.done == 3
    assert 'pair P04' in again.header.value
    for label in ('tie', 'A', 'B'): again.buttons[label].click()
    rows = pr.read_sheet(tmp_path / 'sheet.csv')
    assert [r['label'] for r in rows] == ['A', 'B', 'both_bad', 'tie', 'A', 'B'] and rows[1]['note'] == 'B is complete'
    assert {r['annotator'] for r in rows} == {'reader'}
    scored = pr.score(rows, pr.read_key(tmp_path / 'key.json'))
    assert [s['label'] for s in scored] == ['A', 'B', 'both_bad', 'tie', 'A', 'B']


def test_plain_csv_editing_is_the_alternative(tmp_path):
    import csv
    pairs, sheet, key = build([True] * 4, [True, False] * 2, 4, 9)
    pr.write_blind(sheet, key, tmp_path / 'sheet.csv', tmp_path / 'key.json')
    rows = list(csv.DictReader((tmp_path / 'sheet.csv').open(newline='')))
    for r, lab in zip(rows, ['a', 'B', 'Tie', 'both bad']): r['label'] = lab
    with (tmp_path / 'sheet.csv').open('w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=pr.SHEET_COLUMNS); w.writeheader(); w.writerows(rows)
    scored = pr.score(pr.read_sheet(tmp_path / 'sheet.csv'), pr.read_key(tmp_path / 'key.json'))
    assert [s['label'] for s in scored] == ['A', 'B', 'tie', 'both_bad']


def test_module_is_model_free():
    code = ("import sys, rsi_repro.pair_read; bad = [m for m in ('torch', 'transformers', 'peft', 'trl', 'pandas', 'ipywidgets') "
            "if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == '[]'
