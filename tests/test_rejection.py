"Rejection sampling and rounds: a killed sampler resumes without loss or duplicates; nothing kept stops the stage; arms."
import json, os, signal, subprocess, sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from conftest import DIE_MID_SHARD

from rsi_repro.config import Sampling, load_profile
from rsi_repro.io import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / 'configs/tiny.yaml'

POOL = [{'id': f"r9-{i:03d}", 'families': ['max_words'], 'constraints': [{'id': 'max_words', 'kwargs': {'n': 200}}],
         'prompt': f"Describe item number {i} of the standard library. Answer in at most 200 words."} for i in range(12)]

SAMPLER = DIE_MID_SHARD + """
import json, sys
from dataclasses import replace
from rsi_repro.config import Sampling, load_profile
from rsi_repro.generate import ModelRef
from rsi_repro.rejection import sample_pool

p = load_profile(sys.argv[1])
pool = json.loads(open(sys.argv[4]).read())
sampling = Sampling(k=3, temperature=1.0, top_p=0.95, seed=5, max_new_tokens=12)
sample_pool(pool, ModelRef.from_profile(p), replace(p.serving, shard_size=3), sampling, sys.argv[2], progress=False)
"""

def test_sampler_killed_part_way_loses_and_duplicates_nothing(tmp_path):
    script, pool_file, out = tmp_path / 'sample.py', tmp_path / 'pool.json', tmp_path / 'samples'
    script.write_text(SAMPLER); pool_file.write_text(json.dumps(POOL))
    killed = subprocess.run([sys.executable, str(script), str(TINY), str(out), '3', str(pool_file)], cwd=ROOT)
    assert killed.returncode == -signal.SIGKILL
    assert sorted(p.name for p in out.glob('plan-*/shard-*.jsonl')) == ['shard-00000.jsonl', 'shard-00001.jsonl']
    subprocess.run([sys.executable, str(script), str(TINY), str(out), '0', str(pool_file)], cwd=ROOT, check=True)
    rows = [r for s in sorted(out.glob('plan-*/shard-*.jsonl')) for r in read_jsonl(s)]
    keys = [(r['id'], r['sample']) for r in rows]
    assert keys == [(p['id'], s) for p in POOL for s in range(3)]              # all 36 samples, each once, in order
    fresh = tmp_path / 'fresh'
    subprocess.run([sys.executable, str(script), str(TINY), str(fresh), '0', str(pool_file)], cwd=ROOT, check=True)
    assert rows == [r for s in sorted(fresh.glob('plan-*/shard-*.jsonl')) for r in read_jsonl(s)]   # the same draws as an unbroken run


def test_nothing_passing_the_checker_stops_with_a_clear_message(tmp_path):
    from rsi_repro.generate import ModelRef, load_tokenizer
    from rsi_repro.rejection import NothingKept, rejection_round
    p = load_profile(TINY)
    impossible = [{**r, 'families': ['min_words'], 'constraints': [{'id': 'min_words', 'kwargs': {'n': 500}}]} for r in POOL[:4]]
    ref = ModelRef.from_profile(p)
    with pytest.raises(NothingKept, match="no sample of pool r9 passed the checker"):
        rejection_round(impossible, ref, replace(p.serving, shard_size=4), Sampling(k=2, temperature=1.0, top_p=1.0, seed=0, max_new_tokens=8),
                        tmp_path, load_tokenizer(ref), 256, pool_name='r9')
    assert not list(tmp_path.glob('*.npz'))                  # no empty mix left for a trainer to pick up


def test_arm_waves_put_champion_warm_starts_after_the_champion():
    from rsi_repro.recipes import arm_waves, arm_warm_start
    p = load_profile(TINY)
    waves = [[a.name for a in w] for w in arm_waves(p)]
    assert waves == [['v6141', 'v741', 'v743'], ['v747', 'v749']]
    assert arm_warm_start(p, p.rounds.arms[1]) == 'repair' and arm_warm_start(p, p.rounds.arms[3]) == 'v6141'
    assert [[a.name for a in w] for w in arm_waves(p, ['v749'])] == [['v749']]
    with pytest.raises(KeyError, match="unknown arm"): arm_waves(p, ['v999'])


def test_nemotron_grid_is_the_cards_nine_cells():
    from rsi_repro.recipes import arm_warm_start
    p = load_profile(ROOT / 'configs/nemotron.yaml', check_files=False)
    cells = [(a.name, a.mix, a.steps, arm_warm_start(p, a)) for a in p.rounds.arms[1:]]
    assert cells == [('v741', 'single', 400, 'repair'), ('v742', 'single', 400, 'repair'), ('v743', 'double', 400, 'repair'),
                     ('v744', 'double', 400, 'repair'), ('v745', 'single', 600, 'repair'), ('v746', 'double', 600, 'repair'),
                     ('v747', 'single', 400, 'v6141'), ('v748', 'single', 400, 'v6141'), ('v749', 'double', 400, 'v6141')]


def test_slurm_executor_submits_through_submitit(tmp_path, monkeypatch):
    "submitit's debug cluster runs the submitted job in-process: the same code path as Slurm, without a cluster."
    import submitit
    from rsi_repro import recipes
    calls = []
    monkeypatch.setattr(recipes, 'round_mixes', lambda profile, stage_dir: {('r6', 'single'): {'mix': type('M', (), {'examples': 3})()}})
    def fake_train_arm(profile_path, arm_name, stage_dir, report_to):
        calls.append(arm_name)
        return {'steps': 1, 'seed': 0, 'training_tokens': 10, 'supervised_tokens': 5, 'wall_seconds': 0.1, 'dataset_sha256': 'x' * 64}
    monkeypatch.setattr(recipes, 'train_arm', fake_train_arm)
    p = load_profile(TINY)
    rounds = replace(p.rounds, executor='slurm', slurm={'cluster': 'debug', 'timeout_min': 5}, arms=p.rounds.arms[:2])
    out = recipes.rounds_stage(replace(p, rounds=rounds), tmp_path)
    assert calls == ['v6141', 'v741'] and list(out['arms'].arm) == ['v6141', 'v741']
    assert (tmp_path / 'slurm').is_dir()
