"""Training that survives a kill: a tiny SFT run and a tiny DPO run are SIGKILLed part-way (between steps, and during a
checkpoint's save), run again, and end with the adapter, the loss curve and the token counts of an uninterrupted run,
bit for bit. Each run is a process of its own (a child of the warm process: conftest.WARM_PYTHON), killed as a preempted
job is."""
import json, os, signal, subprocess, sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import WARM_PYTHON

from rsi_repro.config import Lora, Optim
from rsi_repro.corpora import write_sft_mix
from rsi_repro.generate import ModelRef, load_tokenizer
from rsi_repro.io import write_jsonl
from rsi_repro.manifests import content_digest

ROOT = Path(__file__).resolve().parents[1]
BASE = str(ROOT / 'data/tiny_base')
# A run of one kind ('sft' or 'dpo') into OUT; KILL > 0 kills the process once step KILL is done (between steps), or,
# with IN_SAVE, while the checkpoint of step KILL is being saved (after transformers wrote it, before its marker).
DRIVER = """
import os, signal, sys
from pathlib import Path
from rsi_repro import train as T
from rsi_repro.config import Lora, Optim
from rsi_repro.generate import ModelRef
kind, data, out, kill, in_save = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == '1'
real = T.train_and_record
def with_killer(trainer, *a, **k):
    from transformers import TrainerCallback
    class Killer(TrainerCallback):          # added before the library's callbacks: its on_save runs before the marker is written
        def on_step_begin(self, args, state, control, **kw):
            if kill and not in_save and state.global_step == kill: os.kill(os.getpid(), signal.SIGKILL)
        def on_save(self, args, state, control, **kw):
            if kill and in_save and state.global_step == kill: os.kill(os.getpid(), signal.SIGKILL)
    trainer.add_callback(Killer())
    return real(trainer, *a, **k)
T.train_and_record = with_killer
optim = Optim(lr=2e-3, micro_batch=2, grad_accum=2, seq_len=128, seed=3, steps=8, length_grouping=True, checkpoint_steps=2)
base = ModelRef(%r)
if kind == 'sft': T.train_sft(base, 'llama', data, Lora(r=4, alpha=8), optim, out, tag='t', report_to=[])
else: T.train_dpo(base, 'llama', data, Lora(r=4, alpha=8), optim, out, tag='t', beta=0.1, nll_weight=1.0, report_to=[])
""" % BASE


def drive(kind: str, data: Path, out: Path, kill: int = 0, in_save: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([*WARM_PYTHON, '-c', DRIVER, kind, str(data), str(out), str(kill), '1' if in_save else '0'],
                          capture_output=True, text=True, timeout=600, env={**os.environ, 'OMP_NUM_THREADS': '1'})


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp('ck')
    tok = load_tokenizer(ModelRef(BASE))
    convs = [[{'role': 'user', 'content': f'Name module number {i}.'}, {'role': 'assistant', 'content': f'Module {i} is os{"." * (i % 5)}'}]
             for i in range(24)]
    write_sft_mix([(f's{i}', c) for i, c in enumerate(convs)], tok, 128, d / 'sft.npz')
    write_jsonl(d / 'pairs.jsonl', [{'prompt': [{'role': 'user', 'content': f'Question {i}?'}],
                                     'chosen': [{'role': 'assistant', 'content': f'Answer {i}.'}],
                                     'rejected': [{'role': 'assistant', 'content': f'answer answer {"answer " * (i % 4)}{i}'}]} for i in range(40)])
    return {'sft': d / 'sft.npz', 'dpo': d / 'pairs.jsonl'}


@pytest.fixture(scope='module')
def uninterrupted(data, tmp_path_factory):
    "Each kind's uninterrupted run, made once for the tests that compare a resumed run with it."
    made = {}
    def get(kind: str) -> Path:
        if kind not in made:
            out = tmp_path_factory.mktemp(f'whole-{kind}') / 'adapter'
            r = drive(kind, data[kind], out); assert r.returncode == 0, r.stderr[-3000:]
            made[kind] = out
        return made[kind]
    return get


def weights(adapter: Path) -> dict: return load_file(adapter / 'adapter_model.safetensors')
def losses(adapter: Path) -> list: return [(r['step'], r['loss']) for r in json.loads((adapter / 'log_history.json').read_text()) if 'loss' in r]


@pytest.mark.parametrize('kind', ['sft', 'dpo'])
def test_a_run_killed_between_steps_resumes_to_the_uninterrupted_adapter(kind, data, uninterrupted, tmp_path):
    whole, cut = uninterrupted(kind), tmp_path / 'cut'
    r = drive(kind, data[kind], cut, kill=5)
    assert r.returncode == -signal.SIGKILL
    assert sorted(p.name for p in cut.glob('checkpoint-*')) == ['checkpoint-2', 'checkpoint-4']   # the last two kept
    assert not (cut / 'training_evidence.json').exists()
    r = drive(kind, data[kind], cut); assert r.returncode == 0, r.stderr[-3000:]
    a, b = weights(whole), weights(cut)
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)                  # bit for bit
    assert losses(cut) == losses(whole) and len(losses(whole)) == 8
    ev, ev0 = json.loads((cut / 'training_evidence.json').read_text()), json.loads((whole / 'training_evidence.json').read_text())
    assert ev['checkpoints'] == {'every_steps': 2, 'every_minutes': None, 'resumed_from_step': 4, 'redone_steps': 1}
    assert ev0['checkpoints']['resumed_from_step'] is None
    assert (ev['training_tokens'], ev['supervised_tokens'], ev['steps']) == (ev0['training_tokens'], ev0['supervised_tokens'], 8)
    assert not list(cut.glob('checkpoint-*')) and not (cut / '.progress.json').exists()        # the adapter is what ships


def test_a_run_killed_during_a_save_resumes_from_the_checkpoint_before(data, uninterrupted, tmp_path):
    whole, cut = uninterrupted('sft'), tmp_path / 'cut'
    assert drive('sft', data['sft'], cut, kill=6, in_save=True).returncode == -signal.SIGKILL
    assert (cut / 'checkpoint-6').is_dir() and not (cut / 'checkpoint-6' / '.complete').exists()   # written, never marked
    r = drive('sft', data['sft'], cut); assert r.returncode == 0, r.stderr[-3000:]
    assert 'checkpoint-6: not resumed from (no completion marker: the save was cut short); removed' in r.stderr
    ev = json.loads((cut / 'training_evidence.json').read_text())
    assert (ev['checkpoints']['resumed_from_step'], ev['checkpoints']['redone_steps']) == (4, 2)
    a, b = weights(whole), weights(cut)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_checkpoint_of_other_settings_is_not_resumed_from(data, tmp_path):
    cut = tmp_path / 'cut'
    assert drive('sft', data['sft'], cut, kill=5).returncode == -signal.SIGKILL
    d2 = tmp_path / 'mix2.npz'                                                    # other data for the same adapter folder
    tok = load_tokenizer(ModelRef(BASE))
    write_sft_mix([('x', [{'role': 'user', 'content': 'Hi'}, {'role': 'assistant', 'content': 'Hello.'}])] * 8, tok, 128, d2)
    r = drive('sft', d2, cut); assert r.returncode == 0, r.stderr[-3000:]
    assert 'not resumed from (trained with other settings, data or code); removed' in r.stderr
    assert json.loads((cut / 'training_evidence.json').read_text())['checkpoints']['resumed_from_step'] is None


STAGE = """
extends: ../../configs/tiny.yaml
run: {run}
sft:
  corpora:
    - {{name: tulu3, source: data/corpora/tulu_sample.jsonl, bands: [{{start: 0, stop: 128}}]}}
    - {{name: smoltalk, source: data/corpora/smoltalk_sample.jsonl, bands: [{{start: 0, stop: 128}}]}}
  optim: {{lr: 2.0e-3, micro_batch: 8, grad_accum: 2, seq_len: 256, seed: 1, epochs: 1, warmup: 0.05, schedule: cosine_with_min_lr,
          min_lr_rate: 0.01, checkpoint_steps: 2}}
stages:
  - {{name: sft, notebook: sft}}
"""


def test_a_stage_killed_during_training_resumes_on_rerun_and_says_so(tmp_path):
    """The runner and its stage kernel SIGKILLed once a checkpoint is complete; the plain rerun resumes there, records it, and
    ends with the uninterrupted stage's adapter and content (the hash later stages' keys read)."""
    import shutil, time
    run = '_ck_stage'
    d = ROOT / 'outputs' / '_test_profiles'; d.mkdir(parents=True, exist_ok=True)
    profile = d / f'{run}.yaml'; profile.write_text(STAGE.format(run=run))
    run_dir = ROOT / 'outputs' / run
    shutil.rmtree(run_dir, ignore_errors=True)
    try:
        cmd = [sys.executable, '-m', 'rsi_repro.cli', 'run', str(profile)]
        env = {**os.environ, 'OMP_NUM_THREADS': '1'}
        whole = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)   # the uninterrupted stage
        assert whole.returncode == 0, whole.stderr[-3000:]
        uninterrupted = json.loads((run_dir / 'sft/manifest.json').read_text())
        shutil.copytree(run_dir / 'sft', tmp_path / 'whole'); shutil.rmtree(run_dir)
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        adapter, t0 = run_dir / 'sft/epoch0/adapter', time.time()
        while not list(adapter.glob('checkpoint-*/.complete')) and p.poll() is None and time.time() - t0 < 300: time.sleep(0.05)
        assert p.poll() is None, "the stage finished before a checkpoint could be interrupted"
        os.killpg(p.pid, signal.SIGKILL); p.wait()
        assert not (adapter / 'training_evidence.json').exists()
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        assert 'an interrupted run with the same inputs resumes' in r.stdout
        ev = json.loads((run_dir / 'sft/adapter/training_evidence.json').read_text())
        assert ev['checkpoints']['resumed_from_step'] >= 2 and ev['checkpoints']['every_steps'] == 2
        assert not list(run_dir.glob('sft/**/checkpoint-*'))
        resumed = json.loads((run_dir / 'sft/manifest.json').read_text())
        adapter_files = [k for k in uninterrupted['outputs'] if k.startswith('adapter/adapter_model')]
        assert adapter_files and all(resumed['outputs'][k] == uninterrupted['outputs'][k] for k in adapter_files)
        differ = [k for k in resumed['outputs'] if content_digest(run_dir / 'sft' / k, resumed['outputs'][k])
                  != content_digest(tmp_path / 'whole' / k, uninterrupted['outputs'].get(k, ''))]
        assert resumed['content_sha256'] == uninterrupted['content_sha256'], differ   # what later stages are keyed on: nothing below reruns
    finally:
        shutil.rmtree(run_dir, ignore_errors=True); profile.unlink(missing_ok=True)
