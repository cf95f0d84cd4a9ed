"""benchmarks/train_speed.py's stock DPO variants (`trl-dpo-MxG`, `trl-dpo-precompute-MxG`: TRL's DPOTrainer as a user
sets it up) on the tiny Nemotron-H layout on the CPU: they train on the same pairs and count the same real tokens as the
library's `ours-dpo` at the same split, with the profile's DPO adapter and loss, and price nothing."""
import json
import os
import subprocess
import sys
from pathlib import Path

from rsi_repro.config import load_profile

ROOT = Path(__file__).resolve().parents[1]


def test_stock_dpo_trains_the_same_pairs_and_tokens_as_the_library(tmp_path):
    out = tmp_path / 'speed.json'
    env = {**os.environ, 'OMP_NUM_THREADS': '2', 'TOKENIZERS_PARALLELISM': 'false'}
    cmd = [sys.executable, str(ROOT / 'benchmarks/train_speed.py'), '--shape', 'tiny-nemotron-h', '--variants', 'trl-dpo-2x2',
           'trl-dpo-precompute-2x2', 'ours-dpo-2x2', '--steps', '2', '--pairs', '12', '--out', str(out)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    rows = {r['variant']: r for r in doc['runs'][-1]['results']}
    assert not [r.get('error') for r in rows.values() if 'error' in r]
    stock, pre, ours = rows['trl-dpo-2x2'], rows['trl-dpo-precompute-2x2'], rows['ours-dpo-2x2']
    dpo = load_profile(ROOT / 'configs/nemotron.yaml').dpo
    for r in (stock, pre):
        assert len(r['step_seconds']) == 2 and r['tokens_per_s'] > 0
        assert r['lora'] == {'r': dpo.lora.r, 'alpha': dpo.lora.alpha} and r['beta'] == dpo.grid[0].beta
        assert r['nll_weight'] == dpo.nll_weight and r['settings']['loss_type'] == ['sigmoid', 'sft']
        assert r['training_tokens'] == ours['training_tokens']        # the same pairs under the same chat template
    assert stock['settings']['precompute_ref_log_probs'] is False and pre['settings']['precompute_ref_log_probs'] is True
    # only the library's own rows at the profile's split can be rates the estimate reads
    library = {s['variant']: s['library'] for s in doc['summary']}
    assert library['trl-dpo-2x2'] is False and library['trl-dpo-precompute-2x2'] is False
