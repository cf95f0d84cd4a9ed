"""The DPO stage's second search: after the beta/lr grid picks an anchor by the tool-leak audit, `dpo.rank_seed` trains
each listed rank and seed at that anchor's beta and lr, and the same rule ships one of them or the anchor."""
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from rsi_repro import recipes
from rsi_repro.config import DPOSearchArm, load_profile

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def stage(monkeypatch, tmp_path):
    "The dpo stage with training and auditing replaced by a table of each arm's audit (stop rate, tool-leak rate)."
    trained, references = [], []
    def fake_arm(profile, stage_dir, name, beta, lr, lora, optim, pairs_path, warm, prompts, report_to, reference):
        trained.append((name, beta, lr, lora.r, lora.alpha, optim.seed)); references.append(reference)
        stop, leak = AUDIT[name]
        return {'arm': name, 'beta': beta, 'lr': lr, 'r': lora.r, 'alpha': lora.alpha, 'seed': optim.seed,
                'stop_rate': stop, 'tool_leak_rate': leak, 'n': 10}
    monkeypatch.setattr(recipes, 'dpo_arm', fake_arm)
    monkeypatch.setattr(recipes, 'write_preference_pairs', lambda profile, path: 256)
    monkeypatch.setattr(recipes, 'audit_prompts', lambda profile: pd.DataFrame())
    monkeypatch.setattr(recipes, 'stage_adapter', lambda profile, name: tmp_path / name)
    monkeypatch.setattr(recipes, '_ship_adapter', lambda src, dst: None)
    computed = []                                     # the reference log-probabilities: computed once, read by every arm
    monkeypatch.setattr(recipes, 'dpo_reference', lambda *a, **k: computed.append(1) or tmp_path / 'pairs.reference.json')
    yield trained, tmp_path
    assert len(computed) == 1 and references and set(references) == {tmp_path / 'pairs.reference.json'}


AUDIT = {'b010_lr5e-4': (0.8, 0.0), 'b030_lr1e-3': (0.9, 0.0), 'r32_s3': (0.95, 0.0), 'r8_s4': (1.0, 0.5), 'r16_s5': (0.7, 0.0)}


def test_rank_and_seed_are_searched_at_the_anchors_beta_and_lr(stage):
    trained, out = stage
    p = load_profile(ROOT / 'configs' / 'tiny.yaml')
    search = (DPOSearchArm('r32_s3', 32, 64, 3), DPOSearchArm('r8_s4', 8, 16, 4), DPOSearchArm('r16_s5', 16, 32, 5))
    res = recipes.dpo_stage(replace(p, dpo=replace(p.dpo, rank_seed=search)), out)
    # the grid's anchor is b030 (stops most often); every search arm trains at its beta 0.3 and lr 1e-3, with its own r and seed
    assert trained[2:] == [('r32_s3', 0.3, 1e-3, 32, 64, 3), ('r8_s4', 0.3, 1e-3, 8, 16, 4), ('r16_s5', 0.3, 1e-3, 16, 32, 5)]
    # r8_s4 stops always but leaks tool text: refused by the same rule; r32_s3 beats the anchor and ships
    assert res['shipped'] == 'r32_s3'
    audit = pd.read_csv(out / 'anchor_audit.csv')
    assert list(audit.search) == ['beta/lr'] * 2 + ['rank/seed'] * 3 and audit.shipped.sum() == 1
    assert audit.set_index('arm').loc['r32_s3', ['r', 'seed']].tolist() == [32, 3]


def test_without_a_rank_seed_list_the_grid_ships_as_before(stage):
    trained, out = stage
    res = recipes.dpo_stage(load_profile(ROOT / 'configs' / 'tiny.yaml'), out)
    assert [t[0] for t in trained] == ['b010_lr5e-4', 'b030_lr1e-3'] and res['shipped'] == 'b030_lr1e-3'
