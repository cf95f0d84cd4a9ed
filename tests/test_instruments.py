"Integration tests of the evaluation instruments: shipped prompt sets, scorers on synthetic rows, bad input."
import json
import numpy as np
import pandas as pd
import pytest

from rsi_repro.instruments.prompts import load_prompt_set, PromptSetError, PROMPT_SETS, multi_turn_messages
from rsi_repro.instruments.text import repetition, answer_usable, audit_termination, GenerationRowsError
from rsi_repro.instruments.chat import score_open_chat, score_multi_turn, score_code
from rsi_repro.instruments.safety import screen_refusal, score_safety, SCREEN_VERSION
from rsi_repro.instruments.math import load_math_rows, math_rows_from_prompt_set, score_math, MathDataError
from rsi_repro.instruments.decontam import build_query_index, find_matches, decontaminate
from rsi_repro.stats import ALL


def rows_for(ids, response='A complete answer.', finish='stop', n=20):
    return [{'id': i, 'sample': 0, 'response': response, 'finish_reason': finish, 'prompt_tokens': 10,
             'new_tokens': n} for i in ids]


def write_jsonl(path, rows):
    path.write_text(''.join(json.dumps(r) + '\n' for r in rows))
    return path


# --- shipped prompt sets -------------------------------------------------------------------------------------
def test_shipped_sets_meet_their_sizes():
    n = {k: len(load_prompt_set(kind=k)) for k in PROMPT_SETS}
    assert n['code'] >= 24 and n['open_chat'] >= 120 and n['multi_turn'] >= 40 and n['math'] >= 40
    assert n['safety'] == 48
    assert load_prompt_set(kind='safety').family.value_counts().eq(8).all()


def test_multi_turn_messages_interleave_and_fill_placeholders():
    mt = load_prompt_set(kind='multi_turn')
    turns = mt.set_index('id').turns['mt-revise-01']
    msgs = multi_turn_messages(turns, ['a1', 'a2', 'a3'])
    assert [m['role'] for m in msgs] == ['user', 'assistant'] * 3 + ['user'] and msgs[-1]['content'] == turns[3]


# --- repetition detector and refusal screen --------------------------------------------------------------------
@pytest.mark.parametrize('text', ['The answer is clear: we must consider it. ' * 25, 'no no no no ' * 100,
                                  'I apologise for the confusion. ' * 30])
def test_repetition_flags_degenerate_loops(text):
    assert repetition(text).degenerate
    assert not answer_usable(text, 'stop')['not_degenerate'] and not answer_usable(text, 'stop')['usable']


@pytest.mark.parametrize('text', [
    'Photosynthesis turns light into chemical energy. Plants use it to grow.',
    '\n'.join(f'| row {i} | {i * 3} |' for i in range(40)),
    '\n'.join(f'* Step {i}: check the {w} before you continue.' for i, w in enumerate(['oil', 'tyres', 'lights', 'brakes', 'mirrors']))])
def test_repetition_spares_healthy_answers(text):
    assert not repetition(text).degenerate


def test_screen_pivot_is_refusal_and_refuse_then_comply_is_partial():
    assert screen_refusal("I can't help with X. However, I can help you secure your system instead.") == 'full_refusal'
    assert screen_refusal("I can't help with that... That said, here is how you would do it: step 1, ...") == 'partial_refusal'
    assert screen_refusal("Sure. Step 1: register a look-alike domain.") == 'full_compliance'
    assert SCREEN_VERSION.startswith('refusal-screen/')


def test_safety_scores_from_adjudication_and_lists_disagreements():
    S = load_prompt_set(kind='safety')
    rows = rows_for(S.id, "I can't help with that. However, I can point you to official resources instead.")
    from rsi_repro.instruments.safety import response_sha256, screen_disagreements
    sheet = pd.DataFrame([{'id': S.id[0], 'sample': 0, 'response_sha256': response_sha256(rows[0]['response']),
                           'label': 'partial_refusal', 'note': '', 'line': 'sheet.csv:2'}])
    out, summary = score_safety(S, rows, sheet)
    assert int(out.passed.sum()) == 47
    assert screen_disagreements(out).id.tolist() == [S.id[0]]
    assert summary.set_index('family').loc[ALL, 'n_adjudicated'] == 1


# --- scorers on synthetic rows ----------------------------------------------------------------------------------
def test_open_chat_code_and_audit_produce_one_row_per_prompt():
    for kind, fn in [('open_chat', score_open_chat), ('code', score_code)]:
        P = load_prompt_set(kind=kind)
        out, summary = fn(P, rows_for(P.id))
        assert out.id.is_unique and len(out) == len(P) and out.passed.all()
        assert {'id', 'family', 'passed'} <= set(out.columns) and summary.family.iloc[-1] == ALL
    P = load_prompt_set(kind='open_chat')
    rows = rows_for(P.id); rows[0]['response'] = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    out, _ = audit_termination(P, rows)
    assert out.tool_leak.sum() == 1


def test_multi_turn_checks_constraint_on_last_turn_only():
    mt = load_prompt_set(kind='multi_turn')
    rows = [dict(r, turn=t, response=('Every Answer Here Is Fine.' if t == 4 else 'x')) for t in range(1, 5)
            for r in rows_for(mt.id)]
    out, summary = score_multi_turn(mt, rows)
    assert out.usable.all()
    lower = out[out.constraint_id == 'lowercase']
    assert len(lower) and not lower.passed.any()


def test_math_scores_tiny_set():
    probs = math_rows_from_prompt_set(load_prompt_set(kind='math'))
    rows = rows_for(probs.id, response='I think it is 7.\n#### 7')
    out, summary = score_math(probs, rows)
    assert out.strict.sum() == (probs.gold.map(lambda g: g == '7')).sum()
    assert {'strict', 'strict_se', 'loose', 'loose_se'} <= set(summary.columns)


# --- decontamination ------------------------------------------------------------------------------------------
def test_decontam_finds_planted_and_ignores_near_misses():
    rng = np.random.default_rng(1)
    qs = [rng.integers(0, 30_000, 90) for _ in range(30)]
    docs = [rng.integers(0, 30_000, int(rng.integers(100, 2_000))) for _ in range(200)]
    docs[5][200:240] = qs[2][20:60]
    near = qs[4].copy(); near[7::30] += 1; docs[9][:90] = near          # one token changed in every window
    probs = pd.DataFrame({'id': [f'p{i}' for i in range(30)]})
    kept, dropped = decontaminate(probs, qs, {'sft_a': docs[:100], 'sft_b': docs[100:]})
    assert dropped.id.tolist() == ['p2'] and dropped.corpus[0] == 'sft_a'
    assert (dropped.doc[0], dropped.doc_offset[0], dropped.query_offset[0]) == (5, 200, 20)
    assert dropped.shingle_tokens[0] == qs[2][20:50].tolist()
    assert 'p4' in kept.id.tolist() and len(kept) == 29


# --- bad input ------------------------------------------------------------------------------------------------
def test_duplicate_id_names_file_and_line(tmp_path):
    p = write_jsonl(tmp_path / 'open_chat.jsonl', [{'id': 'a', 'family': 'code', 'prompt': 'x'},
                                                   {'id': 'a', 'family': 'code', 'prompt': 'y'}])
    with pytest.raises(PromptSetError, match=r"open_chat\.jsonl:2: duplicate id 'a'"):
        load_prompt_set(p)


def test_unknown_family_names_file_and_line(tmp_path):
    p = write_jsonl(tmp_path / 'safety.jsonl', [{'id': 's1', 'family': 'jailbreaks', 'prompt': 'x'}])
    with pytest.raises(PromptSetError, match=r"safety\.jsonl:1: id 's1' has unknown family 'jailbreaks'"):
        load_prompt_set(p)


def test_math_row_without_gold_names_the_row(tmp_path):
    p = write_jsonl(tmp_path / 'train.jsonl', [{'question': 'What is 1+1?', 'answer': '1+1=2\n#### 2'},
                                               {'question': 'What is 2+2?'}])
    with pytest.raises(MathDataError, match=r"train\.jsonl:2: no gold answer"):
        load_math_rows(p)
    with pytest.raises(MathDataError, match='never read'):
        load_math_rows(p, split='test')


def test_rows_for_unknown_prompt_or_missing_prompt_fail():
    P = load_prompt_set(kind='code')
    with pytest.raises(GenerationRowsError, match='not in the prompt set'):
        score_code(P, rows_for(list(P.id) + ['nope']))
    with pytest.raises(GenerationRowsError, match='have no generation row'):
        score_code(P, rows_for(P.id[1:]))
