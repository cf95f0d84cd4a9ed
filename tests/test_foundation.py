"Integration tests of the foundation: profiles, the over-long policy, generation that survives a kill, the CLI."
import json, os, signal, subprocess, sys, textwrap, time
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import DIE_MID_SHARD, WARM_PYTHON

from rsi_repro.config import ProfileError, load_profile
from rsi_repro.chat import PromptTooLong, render
from rsi_repro.io import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / 'configs/tiny.yaml'


def _profile(tmp_path, text):
    (tmp_path / 'settings.ini').touch()
    p = tmp_path / 'p.yaml'
    p.write_text(textwrap.dedent(text))
    return p

GOOD = """\
run: t
base: {name_or_path: data/tiny_base, architecture: llama}
serving: {max_new_tokens: 8}
stages: []
"""

@pytest.mark.parametrize('edit, message', [
    (lambda t: t + "temperature: 0\n", "p.yaml: temperature: unknown key"),
    (lambda t: t.replace("max_new_tokens: 8", "max_new_tokens: eight"), "p.yaml: serving.max_new_tokens: expected an integer, got str"),
    (lambda t: t.replace("max_new_tokens: 8", "max_new_tokens: 8, top_p: 2"), "p.yaml: serving.top_p: must be in (0, 1]"),
    (lambda t: t, "p.yaml: base.name_or_path: file not found: data/tiny_base"),
])
def test_bad_profile_is_one_clear_line(tmp_path, edit, message):
    p = _profile(tmp_path, edit(GOOD))
    with pytest.raises(ProfileError) as e: load_profile(p)
    assert message in str(e.value) and '\n' not in str(e.value)


def test_bad_profile_through_the_cli_is_one_line(tmp_path):
    p = _profile(tmp_path, GOOD.replace("serving: {max_new_tokens: 8}", "serving: {max_new_tokens: 8, colour: red}"))
    out = subprocess.run([str(Path(sys.executable).parent / 'rsi-repro'), 'run', str(p)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"rsi-repro: error: {p}: serving.colour: unknown key (allowed: " + out.stderr.split('(allowed: ')[1].strip()]


def test_missing_profile_file(tmp_path):
    with pytest.raises(ProfileError, match="profile file not found"): load_profile(tmp_path / 'nope.yaml')


def test_real_profiles_carry_the_seed_cards_numbers():
    nemo = load_profile(ROOT / 'configs/nemotron.yaml', check_files=False)
    assert nemo.base.revision == '434456c9a6753f29d24e23c95d622aaf17111b3b'
    s = nemo.serving
    assert (s.temperature, s.top_p, s.max_new_tokens, s.max_input_tokens) == (0.0, 1.0, 2048, 32768)
    r = nemo.repair.optim
    assert (r.lr, r.micro_batch, r.grad_accum, r.seq_len, r.warmup, r.min_lr_rate, r.seed, r.steps) == (1.6e-5, 2, 24, 2048, 0.02, 0.01, 11, 219)
    v6141 = nemo.rounds.arms[0]
    assert (v6141.name, v6141.steps, v6141.seed, nemo.rounds.optim.warmup, nemo.rounds.optim.effective_batch) == ('v6141', 400, 203, 8, 48)
    assert [a.name for a in nemo.rounds.arms[1:]] == [f"v74{i}" for i in range(1, 10)]
    assert (nemo.sft.lora.r, nemo.sft.lora.alpha, nemo.repair.lora.r, nemo.repair.lora.alpha) == (64, 128, 768, 1536)
    assert (nemo.pools.h6_size, nemo.pools.probe2_size) == (1600, 1200)   # the card's "probe2-300" counts fit n = 1200 only


class CountingTokenizer:
    "One token per character: enough to test the policy without a model."
    chat_template = None
    def __call__(self, text, add_special_tokens=False): return {'input_ids': [ord(c) for c in text]}


def test_overlong_prompt_is_an_error_by_default():
    msgs = [{'role': 'user', 'content': 'x' * 500}]
    with pytest.raises(PromptTooLong, match=r"row q1: prompt is \d+ tokens, over max_input_tokens=300"):
        render(msgs, CountingTokenizer(), 300, row='q1')


def test_overlong_prompt_drops_oldest_turns_and_says_so():
    msgs = [{'role': 'user', 'content': 'old ' * 50}, {'role': 'assistant', 'content': 'reply ' * 50},
            {'role': 'user', 'content': 'new question'}]
    r = render(msgs, CountingTokenizer(), 250, overlong='drop_oldest', row='q2')
    assert r.dropped_turns == 2 and 'new question' in r.text and 'old' not in r.text
    assert 'You are a helpful AI assistant' in r.text      # the system prompt is never dropped
    assert len(r.input_ids) <= 250


KILL_SCRIPT = DIE_MID_SHARD + """
import sys
from dataclasses import replace
from rsi_repro.config import load_profile
from rsi_repro.generate import generate, load_requests
from rsi_repro.eval_plan import model_ref

p = load_profile(sys.argv[1])
reqs = load_requests(p.resolve(p.prompts['serve']))
generate(reqs, model_ref(p), replace(p.serving, shard_size=2, max_new_tokens=16), sys.argv[2], progress=False)
"""

def test_generation_killed_part_way_resumes_with_every_row_once(tmp_path):
    out, script = tmp_path / 'shards', tmp_path / 'gen.py'
    script.write_text(KILL_SCRIPT)
    killed = subprocess.run([*WARM_PYTHON, str(script), str(TINY), str(out), '3'], cwd=ROOT)
    assert killed.returncode == -signal.SIGKILL
    before = {s.name: s.read_bytes() for s in out.glob('plan-*/shard-*.jsonl')}
    assert sorted(before) == ['shard-00000.jsonl', 'shard-00001.jsonl']     # the shard in flight was lost, not half-written
    assert not list(out.glob('plan-*/.*.tmp'))
    subprocess.run([*WARM_PYTHON, str(script), str(TINY), str(out), '0'], cwd=ROOT, check=True)
    rows = [r for s in sorted(out.glob('plan-*/shard-*.jsonl')) for r in read_jsonl(s)]
    want = [r['id'] for r in read_jsonl(ROOT / 'data/prompts/serve.jsonl')]
    assert [r['id'] for r in rows] == want                                   # every row, exactly once, in order
    assert all((next(out.glob('plan-*')) / name).read_bytes() == data for name, data in before.items())   # finished shards kept as they were
    fresh = tmp_path / 'fresh'
    subprocess.run([*WARM_PYTHON, str(script), str(TINY), str(fresh), '0'], cwd=ROOT, check=True)
    assert rows == [r for s in sorted(fresh.glob('plan-*/shard-*.jsonl')) for r in read_jsonl(s)]   # same as an unbroken run


def test_duplicate_request_id_names_the_line(tmp_path):
    from rsi_repro.generate import load_requests
    from rsi_repro.io import DataError
    f = tmp_path / 'r.jsonl'
    f.write_text('{"id": "a", "messages": [{"role": "user", "content": "x"}]}\n' * 2)
    with pytest.raises(DataError, match=r"r.jsonl:2: duplicate id 'a' \(first on line 1\)"): load_requests(f)


def test_adapter_from_another_base_is_refused(tmp_path):
    from rsi_repro.generate import AdapterMismatch, check_adapter_base
    ad = tmp_path / 'adapter'; ad.mkdir()
    (ad / 'adapter_config.json').write_text(json.dumps({'r': 8, 'base_model_name_or_path': 'org/other-base'}))
    (ad / 'training_evidence.json').write_text(json.dumps({'base_identity': 'org/other-base@abc'}))
    with pytest.raises(AdapterMismatch, match="adapter trained on base org/other-base@abc"):
        check_adapter_base(ad, str(ROOT / 'data/tiny_base'))
