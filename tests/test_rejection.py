"Rejection sampling and rounds: a killed sampler resumes without loss or duplicates; nothing kept stops the stage; arms."
import json, os, signal, subprocess, sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from conftest import DIE_MID_SHARD, WARM_PYTHON

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
from rsi_repro.eval_plan import model_ref
from rsi_repro.rejection import sample_pool

p = load_profile(sys.argv[1])
pool = json.loads(open(sys.argv[4]).read())
sampling = Sampling(k=3, temperature=1.0, top_p=0.95, seed=5, max_new_tokens=12)
sample_pool(pool, model_ref(p), replace(p.serving, shard_size=3), sampling, sys.argv[2], progress=False)
"""

def test_sampler_killed_part_way_loses_and_duplicates_nothing(tmp_path):
    script, pool_file, out = tmp_path / 'sample.py', tmp_path / 'pool.json', tmp_path / 'samples'
    script.write_text(SAMPLER); pool_file.write_text(json.dumps(POOL))
    killed = subprocess.run([*WARM_PYTHON, str(script), str(TINY), str(out), '3', str(pool_file)], cwd=ROOT)
    assert killed.returncode == -signal.SIGKILL
    assert sorted(p.name for p in out.glob('plan-*/shard-*.jsonl')) == ['shard-00000.jsonl', 'shard-00001.jsonl']
    subprocess.run([*WARM_PYTHON, str(script), str(TINY), str(out), '0', str(pool_file)], cwd=ROOT, check=True)
    rows = [r for s in sorted(out.glob('plan-*/shard-*.jsonl')) for r in read_jsonl(s)]
    keys = [(r['id'], r['sample']) for r in rows]
    assert keys == [(p['id'], s) for p in POOL for s in range(3)]              # all 36 samples, each once, in order
    fresh = tmp_path / 'fresh'
    subprocess.run([*WARM_PYTHON, str(script), str(TINY), str(fresh), '0', str(pool_file)], cwd=ROOT, check=True)
    assert rows == [r for s in sorted(fresh.glob('plan-*/shard-*.jsonl')) for r in read_jsonl(s)]   # the same draws as an unbroken run


def test_nothing_passing_the_checker_stops_with_a_clear_message(tmp_path):
    from rsi_repro.generate import ModelRef, load_tokenizer
    from rsi_repro.eval_plan import model_ref
    from rsi_repro.rejection import NothingKept, rejection_round
    p = load_profile(TINY)
    impossible = [{**r, 'families': ['min_words'], 'constraints': [{'id': 'min_words', 'kwargs': {'n': 500}}]} for r in POOL[:4]]
    ref = model_ref(p)
    with pytest.raises(NothingKept, match="no sample of pool r9 passed the checker"):
        rejection_round(impossible, ref, replace(p.serving, shard_size=4), Sampling(k=2, temperature=1.0, top_p=1.0, seed=0, max_new_tokens=8),
                        tmp_path, load_tokenizer(ref), 256, pool_name='r9')
    assert not list(tmp_path.glob('*.npz'))                  # no empty mix left for a trainer to pick up


def test_arm_waves_put_champion_warm_starts_after_the_champion():
    from rsi_repro.layout import arm_warm_start
    from rsi_repro.recipes import arm_waves
    p = load_profile(TINY)
    waves = [[a.name for a in w] for w in arm_waves(p)]
    assert waves == [['v6141', 'v741', 'v743', 'v742'], ['v747', 'v749']]
    assert arm_warm_start(p, p.rounds.arms[1]) == 'soup_linear' and arm_warm_start(p, p.rounds.arms[3]) == 'v6141'   # 'parent': the stage-3 soup
    assert [[a.name for a in w] for w in arm_waves(p, ['v749'])] == [['v749']]
    with pytest.raises(KeyError, match="unknown arm"): arm_waves(p, ['v999'])


def test_nemotron_grid_is_the_cards_nine_cells():
    from rsi_repro.layout import arm_warm_start
    p = load_profile(ROOT / 'configs/nemotron.yaml', check_files=False)
    cells = [(a.name, a.mix, a.steps, arm_warm_start(p, a)) for a in p.rounds.arms[1:]]
    parent = 'soup_linear'      # "its stage-3 parent": the stage-3 checkpoint, the plain parameter average of the seeds
    assert cells == [('v741', 'single', 400, parent), ('v742', 'single', 400, parent), ('v743', 'double', 400, parent),
                     ('v744', 'double', 400, parent), ('v745', 'single', 600, parent), ('v746', 'double', 600, parent),
                     ('v747', 'single', 400, 'v6141'), ('v748', 'single', 400, 'v6141'), ('v749', 'double', 400, 'v6141')]


def test_slurm_executor_submits_through_submitit(tmp_path, monkeypatch):
    "submitit's debug cluster runs the submitted job in-process: the same code path as Slurm, without a cluster."
    import submitit
    from rsi_repro import recipes
    from rsi_repro.config import MixTarget
    from rsi_repro.corpora import write_sft_mix
    from rsi_repro.io import sha256_file
    calls = []
    mix = write_sft_mix([(f"e{i}", chat(f"question {i}", "an answer of five words")) for i in range(3)], WordTemplate(), 64,
                        tmp_path / 'mixes' / 'r6' / 'mix_x1.npz')
    monkeypatch.setattr(recipes, 'round_mixes', lambda profile, stage_dir: {('r6', 'single'): {'mix': mix}, ('r6', 'double'): {'mix': mix}})
    def fake_train_arm(profile_path, arm_name, stage_dir, report_to):
        calls.append(arm_name)
        return {'steps': 1, 'seed': 0, 'training_tokens': 10, 'supervised_tokens': 5, 'wall_seconds': 0.1,
                'dataset_sha256': sha256_file(mix.path)}
    monkeypatch.setattr(recipes, 'train_arm', fake_train_arm)
    p = load_profile(TINY)
    rounds = replace(p.rounds, executor='slurm', slurm={'cluster': 'debug', 'timeout_min': 5}, arms=p.rounds.arms[:2],
                     mix_target=MixTarget(examples=6845, tokens=2_200_000, supervised_tokens=1_700_000, trained_tokens=6_300_000))
    out = recipes.rounds_stage(replace(p, rounds=rounds), tmp_path)
    assert calls == ['v6141', 'v741'] and list(out['arms'].arm) == ['v6141', 'v741']
    assert (tmp_path / 'slurm').is_dir()
    # the champion's mix against the card's targets: reached counts come from the mix file and the champion's evidence
    rep = pd.read_csv(tmp_path / 'mix_target.csv', index_col='measure')
    assert rep.loc['examples', ['target', 'reached']].tolist() == [6845, 3]
    assert rep.loc['tokens', 'reached'] == 3 * (2 + 2 + 2 + 5) and rep.loc['supervised_tokens', 'reached'] == 3 * 5
    assert rep.loc['trained_tokens', ['target', 'reached']].tolist() == [6_300_000, 10]


def test_the_repair_stage_trains_on_slurm_when_its_executor_says_so(tmp_path, monkeypatch):
    "The card's stage 3 ran as a Slurm job: `repair.executor: slurm` sends the training through submitit (its debug cluster here)."
    from rsi_repro import recipes, rejection
    from rsi_repro.corpora import write_sft_mix
    from rsi_repro.io import sha256_file
    calls = []
    mix = write_sft_mix([(f"e{i}", chat(f"question {i}", "an answer of five words")) for i in range(3)], WordTemplate(), 64,
                        tmp_path / 'sampling' / 'mix_x1.npz')
    done = {'training_tokens': 10, 'supervised_tokens': 5, 'dataset_sha256': sha256_file(mix.path)}
    monkeypatch.setattr(rejection, 'rejection_round', lambda *a, **k: {'keep_rates': None, 'mix': mix})
    monkeypatch.setattr(recipes, 'read_run_pool', lambda profile, name: [])
    monkeypatch.setattr(recipes, 'resolve_checkpoint', lambda profile, name: None)
    monkeypatch.setattr(recipes, 'load_tokenizer', lambda model: WordTemplate())
    def fake_train_repair(profile_path, stage_dir, mix_path, report_to):
        calls.append((Path(stage_dir), Path(mix_path)))
        return done
    monkeypatch.setattr(recipes, 'train_repair', fake_train_repair)
    p = load_profile(TINY)
    for executor, slurm in (('slurm', {'cluster': 'debug', 'timeout_min': 5}), ('local', {})):
        out = recipes.repair_stage(replace(p, repair=replace(p.repair, executor=executor, slurm=slurm)), tmp_path)
        assert out['evidence'] == done
    assert calls == [(tmp_path, Path(mix.path))] * 2 and (tmp_path / 'slurm').is_dir()        # one submitit job, then the same call here


class WordTemplate:
    "A tokenizer stand-in: one token per word, two markers per turn, the assistant's words supervised."
    def apply_chat_template(self, messages, **kw):
        ids, mask = [], []
        for m in messages:
            words = [len(w) for w in m['content'].split()]
            ids += [1, *words, 2]; mask += [0, *[int(m['role'] == 'assistant')] * len(words), 0]
        return {'input_ids': ids, 'assistant_masks': mask}


def chat(q, a): return [{'role': 'user', 'content': q}, {'role': 'assistant', 'content': a}]


def test_a_repair_report_counts_the_mix_on_disk_not_the_target(tmp_path):
    "The repair stage's report reads the mix file it trained on: a target that differs, or a mix rewritten, shows."
    from rsi_repro.config import MixTarget
    from rsi_repro.corpora import write_sft_mix
    from rsi_repro.io import sha256_file
    from rsi_repro.recipes import mix_target_report
    mix = tmp_path / 'sampling' / 'mix_x1.npz'
    write_sft_mix([(f"e{i}", chat("ask", "one two three")) for i in range(4)], WordTemplate(), 64, mix)
    ev = {'dataset_sha256': sha256_file(mix), 'training_tokens': 999}
    rep = mix_target_report(MixTarget(examples=3345), mix, ev, tmp_path / 'mix_target.csv')
    assert rep.loc['examples', ['target', 'reached', 'difference']].tolist() == [3345, 4, 4 - 3345]
    assert pd.read_csv(tmp_path / 'mix_target.csv', index_col='measure').loc['examples', 'reached'] == 4
    assert json.loads((tmp_path / 'mix_target.json').read_text())['mix_sha256'] == sha256_file(mix)
    write_sft_mix([("only", chat("ask", "one"))], WordTemplate(), 64, mix)            # the same path, another mix
    assert mix_target_report(MixTarget(examples=3345), mix, None, tmp_path / 'again.csv').loc['examples', 'reached'] == 1
    with pytest.raises(ValueError, match='trained on another mix'):                   # evidence of the earlier mix
        mix_target_report(MixTarget(examples=3345), mix, ev, tmp_path / 'stale.csv')
