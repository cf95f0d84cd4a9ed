"""The whole study through the runner, on a smaller run derived from the tiny profile (`extends`):
every stage executes, a second run skips every stage, --only/--force/--arm behave, the site is built."""
import hashlib, json, shutil, subprocess, sys, time
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


def outcome_digest(run_dir: Path) -> str:
    "sha256 over every per-prompt outcome row of a run (which prompts passed, and the answers) and the decision's verdicts."
    h = hashlib.sha256()
    for p in sorted(run_dir.glob('eval*/*/*.outcomes.jsonl')):
        h.update(p.relative_to(run_dir).as_posix().encode())
        for line in p.read_text().splitlines():
            row = json.loads(line)
            h.update(json.dumps({k: row.get(k) for k in ('id', 'checkpoint', 'instrument', 'passed', 'response')}, sort_keys=True).encode())
    d = json.loads((run_dir / 'decide/decision.json').read_text())
    h.update(json.dumps({'promote': d['promote'], 'clauses': [(c.get('kind'), c.get('passed')) for c in d.get('clauses', [])]},
                        sort_keys=True).encode())
    return h.hexdigest()


def test_single_and_double_mixes_are_different_draws(profile_path, first_run):
    "The doubled mix is a second, independent draw: its own sha256 and about twice the single mix's examples."
    prof = load_profile(profile_path)
    mixes = prof.run_dir / 'rounds' / 'mixes' / 'r6'
    single, double = (json.loads((mixes / f'mix_x{k}.json').read_text()) for k in (1, 2))
    assert sha256_file(mixes / 'mix_x1.npz') != sha256_file(mixes / 'mix_x2.npz')
    assert 1.5 * single['examples'] <= double['examples'] <= 2 * single['examples'], (single['examples'], double['examples'])
    arms = {r['mix']: r['dataset_sha256'] for r in __import__('csv').DictReader(open(prof.run_dir / 'rounds' / 'arms.csv'))}
    assert arms['single'] != arms['double']


def test_the_study_is_not_all_ties(profile_path, first_run):
    "Stages change which prompts pass: the repair disagrees with the base on some H6 prompts, more often for the better."
    from rsi_repro.summary import ladder
    lad = ladder(load_profile(profile_path), instruments=['h6']).set_index('step')
    base_to_repair = lad.loc['base → repair']
    assert base_to_repair.fixed + base_to_repair.lost > 0 and base_to_repair.fixed > base_to_repair.lost, base_to_repair
    assert (lad.fixed + lad.lost).sum() > 0


def test_two_runs_from_scratch_agree_prompt_by_prompt(profile_path, first_run):
    "The same profile run again from scratch (under another run name) gives the same per-prompt outcomes and decision."
    again = profile_path.with_name(f'{RUN}-again.yaml')
    again.write_text(SMALL.replace(f"run: {RUN}", f"run: {RUN}-again"))
    try:
        run(again, log=lambda *a: None)
        assert outcome_digest(load_profile(again).run_dir) == outcome_digest(load_profile(profile_path).run_dir)
    finally:
        shutil.rmtree(load_profile(again).run_dir, ignore_errors=True); again.unlink(missing_ok=True)
