"""A stage recomputed to the same weights and rows reruns nothing below it: later stages are keyed on what a stage
computed (`content_sha256`), not on how long it took or the logs it left (which its `outputs` still check byte for
byte). Two real runs of a small SFT -> DPO profile on the tiny base."""
import json, os, shutil, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = '_recompute'
PROFILE = f"""extends: ../../configs/tiny.yaml
run: {RUN}
sft:
  corpora:
    - {{name: tulu3, source: data/corpora/tulu_sample.jsonl, bands: [{{start: 0, stop: 32}}]}}
    - {{name: smoltalk, source: data/corpora/smoltalk_sample.jsonl, bands: [{{start: 0, stop: 32}}]}}
  optim: {{lr: 2.0e-3, micro_batch: 8, grad_accum: 2, seq_len: 256, seed: 1, epochs: 1, warmup: 0.05, schedule: cosine_with_min_lr, min_lr_rate: 0.01}}
dpo:
  corpus: {{name: ultrafeedback, source: data/corpora/ultrafeedback_sample.jsonl, bands: [{{start: 0, stop: 16}}]}}
  grid:
    - {{name: b010_lr5e-4, beta: 0.1, lr: 5.0e-4}}
stages:
  - {{name: sft, notebook: sft}}
  - {{name: dpo, notebook: dpo, needs: [sft]}}
"""


def test_a_forced_recompute_with_identical_weights_reruns_nothing_downstream():
    "SFT, then DPO (with its shared reference pass), each forced to recompute: the same content, nothing below reruns."
    d = ROOT / 'outputs' / '_test_profiles'; d.mkdir(parents=True, exist_ok=True)
    profile, run_dir = d / f'{RUN}.yaml', ROOT / 'outputs' / RUN
    profile.write_text(PROFILE); shutil.rmtree(run_dir, ignore_errors=True)
    run = lambda *extra: subprocess.run([sys.executable, '-m', 'rsi_repro.cli', 'run', str(profile), *extra], cwd=ROOT,
                                        capture_output=True, text=True, timeout=900, env={**os.environ, 'OMP_NUM_THREADS': '1'})
    try:
        first = run(); assert first.returncode == 0, first.stderr[-3000:]
        before = json.loads((run_dir / 'sft/manifest.json').read_text())
        again = run('--force', 'sft'); assert again.returncode == 0, again.stderr[-3000:]
        after = json.loads((run_dir / 'sft/manifest.json').read_text())
        assert before['outputs_sha256'] != after['outputs_sha256']         # the recompute wrote other timings and logs ...
        assert before['outputs']['adapter/adapter_model.safetensors'] == after['outputs']['adapter/adapter_model.safetensors']
        assert before['content_sha256'] == after['content_sha256']         # ... and computed the same thing
        assert '[dpo] unchanged, skipped' in again.stdout, again.stdout
        dpo = json.loads((run_dir / 'dpo/manifest.json').read_text())          # DPO: its reference pass logs each forward's time
        redo = run('--force', 'dpo'); assert redo.returncode == 0, redo.stderr[-3000:]
        dpo_again = json.loads((run_dir / 'dpo/manifest.json').read_text())
        assert dpo['outputs_sha256'] != dpo_again['outputs_sha256'] and dpo['content_sha256'] == dpo_again['content_sha256']
    finally:
        shutil.rmtree(run_dir, ignore_errors=True); profile.unlink(missing_ok=True)
