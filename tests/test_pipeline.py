"""The whole study through the runner, on a smaller run derived from the tiny profile (`extends`):
every stage executes, a second run skips every stage, --only/--force/--arm behave, the site is built."""
import json, shutil, subprocess, sys, time
from pathlib import Path

import pytest

from rsi_repro.config import load_profile
from rsi_repro.pipeline import read_manifest, run
from rsi_repro.io import sha256_file

ROOT = Path(__file__).resolve().parents[1]
RUN = 'ci-e2e'

SMALL = f"""
extends: ../../configs/tiny.yaml
run: {RUN}
serving: {{max_new_tokens: 24}}
sft:
  corpora:
    - {{name: tulu3, source: data/corpora/tulu_sample.jsonl, bands: [{{start: 0, stop: 48}}, {{start: 48, stop: 96}}]}}
    - {{name: smoltalk, source: data/corpora/smoltalk_sample.jsonl, bands: [{{start: 0, stop: 48}}, {{start: 48, stop: 96}}]}}
dpo:
  corpus: {{name: ultrafeedback, source: data/corpora/ultrafeedback_sample.jsonl, bands: [{{start: 0, stop: 48}}]}}
  grid: [{{name: b010, beta: 0.1, lr: 5.0e-4}}]
  audit: {{start: 1400, stop: 1408}}
  max_tool_leak_rate: 1.0
repair:
  sampling: {{k: 2, temperature: 0.7, top_p: 0.9, seed: 5, max_new_tokens: 24, cap_per_prompt: 2}}
  optim: {{lr: 1.0e-3, micro_batch: 4, grad_accum: 1, seq_len: 256, seed: 11, steps: 2}}
rounds:
  sampling: {{k: 2, temperature: 0.7, top_p: 0.9, seed: 6, max_new_tokens: 24, cap_per_prompt: 2}}
  optim: {{lr: 1.0e-3, micro_batch: 4, grad_accum: 1, seq_len: 256, seed: 203, steps: 2}}
  arms:
    - {{name: v6141, pool: r6, warm_start: repair, mix: single, steps: 2, seed: 203}}
    - {{name: v741, pool: r6, warm_start: parent, mix: double, steps: 2, seed: 741}}
pools: {{seed: 6, h6_size: 26, probe2_size: 13, rounds: {{r5: 32, r6: 32}}}}
evals:
  checkpoints: [base, repair, v6141]
  instruments: [h6, probe2, open_chat, termination]
  open_chat: {{n: 8}}
  termination: {{sets: [open_chat]}}
stages:
  - {{name: serve, notebook: serve}}
  - {{name: pools, notebook: pools}}
  - {{name: sft, notebook: sft}}
  - {{name: dpo, notebook: dpo, needs: [sft]}}
  - {{name: repair, notebook: repair, needs: [pools, dpo]}}
  - {{name: rounds, notebook: rounds, needs: [pools, repair], takes_arms: true}}
  - {{name: preregister, notebook: preregister}}
  - {{name: eval, notebook: eval, needs: [preregister, pools, repair, rounds]}}
  - {{name: eval_arms, notebook: eval, needs: [preregister, pools, rounds], params: {{checkpoints: [v741], instruments: [h6]}}}}
  - {{name: decide, notebook: decide, needs: [preregister, eval]}}
  - {{name: grid, notebook: grid, needs: [eval, eval_arms], params: {{eval_stages: [eval_arms, eval]}}}}
  - {{name: pair_read, notebook: pair_read, needs: [eval]}}
  - {{name: soups, notebook: soups, needs: [repair]}}
  - {{name: report, notebook: report, needs: [decide, grid, pair_read, soups]}}
"""

@pytest.fixture(scope='module')
def profile_path():
    d = ROOT / 'outputs' / '_test_profiles'; d.mkdir(parents=True, exist_ok=True)
    p = d / f'{RUN}.yaml'; p.write_text(SMALL)
    shutil.rmtree(ROOT / 'outputs' / RUN, ignore_errors=True)
    yield p
    shutil.rmtree(ROOT / 'outputs' / RUN, ignore_errors=True); p.unlink(missing_ok=True)


@pytest.fixture(scope='module')
def first_run(profile_path):
    return run(profile_path, log=lambda *a: None)


def test_every_stage_runs_and_leaves_notebook_and_manifest(profile_path, first_run):
    prof = load_profile(profile_path)
    assert [r.status for r in first_run] == ['ran'] * len(prof.stages)
    for s in prof.stages:
        m = read_manifest(prof.run_dir / s.name)
        assert m and (prof.run_dir / s.name / m['executed_notebook']).exists()
        for rel, digest in m['outputs'].items():                      # the manifest hashes what is on disk
            assert sha256_file(prof.run_dir / s.name / rel) == digest
        assert set(m['versions']) >= {'python', 'torch', 'transformers', 'peft', 'trl', 'papermill'}


def test_adapters_evidence_names_the_file_it_was_trained_on(profile_path, first_run):
    prof = load_profile(profile_path)
    for ad in [prof.run_dir / 'sft/adapter', prof.run_dir / 'dpo/adapter', prof.run_dir / 'repair/adapter',
               prof.run_dir / 'rounds/v6141/adapter', prof.run_dir / 'rounds/v741/adapter']:
        ev = json.loads((ad / 'training_evidence.json').read_text())
        assert ev['dataset_sha256'] == sha256_file(ev['dataset_path']), ad
        assert (ad / 'chat_template.jinja').exists()


def test_decision_and_grid_are_written(profile_path, first_run):
    prof = load_profile(profile_path)
    decision = json.loads((prof.run_dir / 'decide/decision.json').read_text())
    assert decision['candidate'] == 'v6141' and decision['incumbent'] == 'repair' and isinstance(decision['promote'], bool)
    assert (prof.run_dir / 'grid/grid_h6.csv').exists()
    assert (prof.run_dir / 'report/site/index.html').exists()


def test_pair_read_and_soups_are_written_and_shown(profile_path, first_run):
    prof = load_profile(profile_path)
    summary = json.loads((prof.run_dir / 'pair_read/pair_read.summary.json').read_text())
    assert summary['first'] == 'repair' and summary['second'] == 'v6141' and summary['annotators'] == [
        'scripted: prefer the answer that passes more checks, else the shorter']
    assert 'v6141' not in (prof.run_dir / 'pair_read/sheet.csv').read_text()
    weights = (prof.run_dir / 'soups/soup_weights.csv').read_text()
    assert weights.splitlines()[0].startswith('soup,method,rank') and 'uniform' in weights and 'svd' in weights
    for f in ('soups_vs_parents.csv', 'degeneracy.csv', 'reads.csv', 'soups/uniform/training_evidence.json'):
        assert (prof.run_dir / 'soups' / f).exists(), f
    site = prof.run_dir / 'report/site/stages'
    assert 'SCRIPTED READ' in (site / 'pair_read.html').read_text() and 'rel_error_mean' in (site / 'soups.html').read_text()
    report = (prof.run_dir / 'report/report.ipynb').read_text()
    assert 'Blinded pair read: repair vs v6141, SCRIPTED READ' in report and 'distance from the parents' in report


def test_second_run_skips_every_stage_in_seconds(profile_path, first_run):
    t0 = time.time()
    again = run(profile_path, log=lambda *a: None)
    assert {r.status for r in again} == {'skipped'}
    assert time.time() - t0 < 30


def test_only_and_force(profile_path, first_run):
    res = run(profile_path, only=['serve'], force=['serve'], log=lambda *a: None)
    assert [(r.stage, r.status) for r in res] == [('serve', 'ran')]


def test_editing_the_sealed_rule_makes_decide_fail(profile_path, first_run):
    "The rule in the profile changes after its results exist: the decision stage refuses, naming the change."
    from rsi_repro.pipeline import StageFailed
    edited = profile_path.with_name('edited.yaml')
    edited.write_text(profile_path.read_text().replace("stages:", "promotion:\n  clauses:\n    - {kind: delta_above, instrument: h6, threshold: -1.0}\nstages:", 1))
    try:
        with pytest.raises(StageFailed, match="stage 'decide' failed.*changed since it was sealed"):
            run(edited, only=['decide'], force=['decide'], log=lambda *a: None)
    finally:
        edited.unlink(missing_ok=True)


def test_unknown_arm_is_refused(profile_path):
    with pytest.raises(KeyError, match="unknown arm"):
        run(profile_path, arms=['v999'], log=lambda *a: None)
