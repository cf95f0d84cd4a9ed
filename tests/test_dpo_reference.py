"""The DPO stage's arms share one reference: its log-probabilities, computed once per pair set beside the pairs file, give
the losses the plain path (TRL computing the reference at every step) gives; every arm reads the one file; a changed pair
set or reference adapter makes the file stale (computed again, refused by an arm). Tiny base, CPU."""
import json
from pathlib import Path

import pytest

from rsi_repro.config import Lora, Optim
from rsi_repro.corpora import write_sft_mix
from rsi_repro.generate import ModelRef, load_tokenizer
from rsi_repro.io import sha256_file, write_jsonl

ROOT = Path(__file__).resolve().parents[1]
BASE = ModelRef(str(ROOT / 'data/tiny_base'))
CHAT = [[{'role': 'user', 'content': 'What is a tuple?'}, {'role': 'assistant', 'content': 'An immutable sequence.'}],
        [{'role': 'user', 'content': 'Name a module.'}, {'role': 'assistant', 'content': 'The os module.'}]]


def pairs(n, salt=''):
    "Preference pairs whose answers differ in length, so the reference's padding differs from a training batch's."
    return [{'prompt': [{'role': 'user', 'content': f'Question {i}{salt}: name a colour.'}],
             'chosen': [{'role': 'assistant', 'content': 'Blue.' + ' It is the colour of the sky.' * (i % 3)}],
             'rejected': [{'role': 'assistant', 'content': f'I would rather count: {" ".join(str(k) for k in range(i + 2))}.'}]}
            for i in range(n)]


@pytest.fixture(scope='module')
def warm(tmp_path_factory):
    "An SFT adapter the DPO arms start from (the stage's reference), moved away from the base by a few steps."
    from rsi_repro.train import train_sft
    d = tmp_path_factory.mktemp('sft')
    write_sft_mix([(f'c{i}', c) for i, c in enumerate(CHAT)], load_tokenizer(BASE), 256, d / 'sft.npz')
    train_sft(BASE, 'llama', d / 'sft.npz', Lora(r=4, alpha=8), Optim(lr=5e-2, micro_batch=2, grad_accum=1, seq_len=256, seed=0, steps=3),
              d / 'adapter', tag='sft', report_to=[])
    return str(d / 'adapter')


def opt(**kw):
    return Optim(**{**dict(lr=1e-3, micro_batch=2, grad_accum=2, seq_len=128, seed=0, steps=3, warmup=0.0, schedule='constant'), **kw})


def log(adapter):
    return [r for r in json.loads((Path(adapter) / 'log_history.json').read_text()) if 'loss' in r]


def test_shared_reference_gives_the_plain_losses(tmp_path, warm):
    """One arm, three steps, both ways: TRL's reference adapter at every step, and the reference file. The per-step
    losses and reward margins agree to float noise; a reference that is off by 0.5 nats on the chosen answers does not."""
    from rsi_repro.train import dpo_reference, train_dpo
    write_jsonl(tmp_path / 'pairs.jsonl', pairs(8))
    kw = dict(tag='arm', beta=0.1, nll_weight=1.0, warm_start=warm, report_to=[])
    plain = train_dpo(BASE, 'llama', tmp_path / 'pairs.jsonl', Lora(r=4, alpha=8), opt(), tmp_path / 'plain', **kw)
    ref = dpo_reference(BASE, 'llama', tmp_path / 'pairs.jsonl', Lora(r=4, alpha=8), opt(), warm_start=warm)
    shared = train_dpo(BASE, 'llama', tmp_path / 'pairs.jsonl', Lora(r=4, alpha=8), opt(), tmp_path / 'shared', reference=ref, **kw)
    a, b = log(tmp_path / 'plain'), log(tmp_path / 'shared')
    assert len(a) == len(b) == 3 and a[-1]['loss'] != a[0]['loss']          # the policy moved
    assert [r['loss'] for r in b] == pytest.approx([r['loss'] for r in a], rel=1e-5)
    assert [r['rewards/margins'] for r in b] == pytest.approx([r['rewards/margins'] for r in a], abs=1e-5)
    assert abs(b[0]['rewards/margins']) < 1e-5                                # the reference is the policy at step 0
    assert 'reference_sha256' not in plain and shared['reference_sha256'] == sha256_file(ref)
    assert shared['training_tokens'] == plain['training_tokens'] and shared['supervised_tokens'] == plain['supervised_tokens']
    doc = json.loads(ref.read_text())                                         # a wrong reference is seen in the loss
    doc['ref_chosen_logps'] = [x + 0.5 for x in doc['ref_chosen_logps']]
    ref.write_text(json.dumps(doc))
    train_dpo(BASE, 'llama', tmp_path / 'pairs.jsonl', Lora(r=4, alpha=8), opt(steps=1), tmp_path / 'off', reference=ref, **kw)
    assert log(tmp_path / 'off')[0]['loss'] != pytest.approx(a[0]['loss'], rel=1e-3)


def test_two_arms_read_one_reference_computed_once(tmp_path, warm, monkeypatch):
    """The stage's arms (two betas) read one file, computed once; a changed pair set computes it again, and an arm whose
    pairs or reference adapter is not the file's refuses it."""
    import rsi_repro.train as train
    calls = []
    real = train.reference_logps
    monkeypatch.setattr(train, 'reference_logps', lambda *a, **k: calls.append(1) or real(*a, **k))
    write_jsonl(tmp_path / 'pairs.jsonl', pairs(4))
    args = (BASE, 'llama', tmp_path / 'pairs.jsonl', Lora(r=4, alpha=8), opt(steps=1))
    ref = train.dpo_reference(*args, warm_start=warm)
    assert train.dpo_reference(*args, warm_start=warm) == ref and len(calls) == 1      # current: read, not computed
    assert ref == tmp_path / 'pairs.reference.json'
    evs = [train.train_dpo(*args, tmp_path / f'arm{i}', tag=f'arm{i}', beta=beta, nll_weight=1.0, warm_start=warm, reference=ref, report_to=[])
           for i, beta in enumerate((0.05, 0.1))]
    assert len(calls) == 1 and {e['reference_sha256'] for e in evs} == {sha256_file(ref)} and evs[0]['reference'] == evs[1]['reference']
    with pytest.raises(ValueError, match="pairs.reference.json: computed for another reference_identity than this run's"):
        train.train_dpo(*args, tmp_path / 'x', tag='x', beta=0.1, nll_weight=1.0, warm_start=None, reference=ref, report_to=[])
    write_jsonl(tmp_path / 'pairs.jsonl', pairs(4, salt='b'))                           # another pair set
    with pytest.raises(ValueError, match="computed for another pairs_sha256"):
        train.train_dpo(*args, tmp_path / 'x', tag='x', beta=0.1, nll_weight=1.0, warm_start=warm, reference=ref, report_to=[])
    assert train.dpo_reference(*args, warm_start=warm) == ref and len(calls) == 2
    assert train.reference_is_current(ref, train.reference_key(BASE, tmp_path / 'pairs.jsonl', warm, opt()))


def test_the_arms_are_current_only_with_the_reference_they_read(tmp_path, warm):
    "is_current keys an arm on the reference file's sha256 too, as the dpo stage asks: a recomputed reference retrains."
    from rsi_repro.train import dpo_reference, is_current, train_dpo
    write_jsonl(tmp_path / 'pairs.jsonl', pairs(4))
    o = opt(steps=1)
    ref = dpo_reference(BASE, 'llama', tmp_path / 'pairs.jsonl', Lora(r=4, alpha=8), o, warm_start=warm)
    train_dpo(BASE, 'llama', tmp_path / 'pairs.jsonl', Lora(r=4, alpha=8), o, tmp_path / 'arm', tag='arm', beta=0.1, nll_weight=1.0,
              warm_start=warm, reference=ref, report_to=[])
    current = lambda: is_current(tmp_path / 'arm', tmp_path / 'pairs.jsonl', warm, Lora(r=4, alpha=8), o, BASE, lr=o.lr, beta=0.1,
                                 nll_weight=1.0, reference_sha256=sha256_file(ref))
    assert current()
    doc = json.loads(ref.read_text()); doc['ref_chosen_logps'][0] += 1e-3; ref.write_text(json.dumps(doc))
    assert not current()


def test_dpo_pairs_the_fit_probes_are_the_longest_as_trl_keeps_them(tmp_path, warm):
    """micro_batch_fit for DPO: the fit's lengths are TRL's own tokenization of each pair (prompt and the longer answer),
    capped at seq_len where the collator truncates; a pair whose prompt alone fills seq_len is dropped by TRL and by the fit."""
    from rsi_repro.train import (dpo_trainer_factory, heaviest_micro_batch, load_for_training, preference_rows, processed_pairs)
    rows = pairs(6)
    rows[2]['rejected'][0]['content'] = 'no ' * 300                        # far past seq_len: truncated to it
    rows[4]['prompt'][0]['content'] = 'why ' * 300                         # the prompt alone fills seq_len: dropped
    write_jsonl(tmp_path / 'pairs.jsonl', rows)
    o = opt(micro_batch=2, grad_accum=1, seq_len=96)
    net = load_for_training(BASE, Lora(r=4, alpha=8), 'llama', warm)
    make = dpo_trainer_factory(net, load_tokenizer(BASE), o, beta=0.1, nll_weight=1.0)
    kept, lengths = processed_pairs(make, preference_rows(tmp_path / 'pairs.jsonl'), o)
    assert kept['pair'] == [0, 1, 2, 3, 5]
    assert lengths[2] == 96 and all(n < 96 for i, n in enumerate(lengths) if i != 2)
    assert lengths == [min(96, len(p) + max(len(c), len(r))) for p, c, r in zip(kept['prompt_ids'], kept['chosen_ids'], kept['rejected_ids'])]
    probe = heaviest_micro_batch(lengths, 2, 2, 0, False, False, 1, known=False)
    assert lengths[probe[0]] == 96 and lengths[probe[1]] == max(n for i, n in enumerate(lengths) if i != probe[0])


def test_dpo_takes_micro_batch_fit_and_cuts_its_steps_without_changing_the_preference_loss(tmp_path, warm):
    """A DPO arm with micro_batch_fit loads and trains (on the CPU at the profile's split); cut 1 x 4 or 4 x 1 (what a fit
    may choose) the sigmoid loss per step is the same (the NLL term is TRL's per-micro-batch token mean: off here)."""
    import torch
    from rsi_repro.train import train_dpo
    write_jsonl(tmp_path / 'pairs.jsonl', pairs(8))
    kw = dict(beta=0.1, nll_weight=0.0, warm_start=warm, report_to=[])
    if not torch.cuda.is_available():
        ev = train_dpo(BASE, 'llama', tmp_path / 'pairs.jsonl', Lora(r=4, alpha=8), opt(steps=1, micro_batch_fit=True, activation_checkpointing='auto'),
                       tmp_path / 'fit', tag='fit', **kw)
        assert (ev['micro_batch'], ev['grad_accum'], ev['fit']) == (2, 2, {'skipped': 'no CUDA device'})
    for m in (1, 4):
        train_dpo(BASE, 'llama', tmp_path / 'pairs.jsonl', Lora(r=4, alpha=8), opt(micro_batch=m, grad_accum=4 // m, steps=2), tmp_path / f'm{m}',
                  tag=f'm{m}', **kw)
    assert [r['loss'] for r in log(tmp_path / 'm1')] == pytest.approx([r['loss'] for r in log(tmp_path / 'm4')], rel=1e-5)


def test_the_beta_lr_arms_measure_one_fit_and_another_rank_its_own(tmp_path, warm, monkeypatch):
    """micro_batch_fit on a GPU, played on the CPU: the stage's beta/lr arms (one pair set, one starting adapter, one rank
    and seed) measure one split between them, the second arm's evidence naming the first as the run that measured it; an
    arm of another rank measures its own. Each arm trains at the split it was given."""
    import rsi_repro.train as train
    import rsi_repro.train_batches as train_batches
    from rsi_repro.train import Split
    measured = []
    def fit(make, net, rows, optim, seed, steps):
        measured.append(len(rows()[0]))        # the rows TRL keeps, read only when measuring
        return Split(4, 1, False), {'candidates': [{'micro_batch': 4, 'grad_accum': 1}], 'seconds': 3.0}
    monkeypatch.setattr(train, 'resolve_split', fit)
    monkeypatch.setattr(train, 'gpu_identity', lambda: ['a GPU', 1])
    monkeypatch.setattr(train_batches, '_FITS', {})           # shared_fit's own registry, in its module
    write_jsonl(tmp_path / 'pairs.jsonl', pairs(8))
    o = opt(steps=1, micro_batch_fit=True)
    arm = lambda name, beta, lr, lora: train.train_dpo(BASE, 'llama', tmp_path / 'pairs.jsonl', lora, o, tmp_path / name, tag=name, beta=beta,
                                                       nll_weight=1.0, warm_start=warm, lr=lr, report_to=[])
    a, b = arm('b010', 0.1, 1e-3, Lora(r=4, alpha=8)), arm('b030', 0.3, 5e-4, Lora(r=4, alpha=8))
    assert measured == [8]
    assert (a['micro_batch'], a['grad_accum'], b['micro_batch'], b['grad_accum']) == (4, 1, 4, 1)
    assert a['fit']['seconds'] == 3.0 and 'measured_by' not in a['fit']
    assert (b['fit']['seconds'], b['fit']['measured_by'], b['fit']['measured_seconds'], b['fit']['candidates']) == (0.0, 'b010', 3.0, a['fit']['candidates'])
    c = arm('r8', 0.1, 1e-3, Lora(r=8, alpha=16))
    assert measured == [8, 8] and 'measured_by' not in c['fit']


def test_a_later_job_of_the_run_takes_the_fit_of_its_shape_from_the_runs_folder(tmp_path, warm, monkeypatch):
    """micro_batch_fit on a GPU, played on the CPU, across processes: a job measures its split and keeps it in the run's
    fit folder ($RSI_REPRO_FIT_CACHE, which the pipeline sets for every stage); a job of another process (this process
    with its own memory of fits cleared) with another seed, beta and learning rate on rows of the same shapes takes it
    from there, its evidence saying so; rows of other shapes are measured again."""
    import rsi_repro.train as train
    import rsi_repro.train_batches as train_batches
    from rsi_repro.io import FIT_CACHE_ENV
    from rsi_repro.train import Split
    measured = []
    def fit(make, net, rows, optim, seed, steps):
        measured.append(len(rows()[0]))
        return Split(4, 1, False), {'candidates': [{'micro_batch': 4, 'grad_accum': 1}], 'seconds': 3.0}
    monkeypatch.setattr(train, 'resolve_split', fit)
    monkeypatch.setattr(train, 'gpu_identity', lambda: ['a GPU', 1])
    monkeypatch.setattr(train_batches, '_FITS', {})
    monkeypatch.setenv(FIT_CACHE_ENV, str(tmp_path / 'run' / '.fits'))
    write_jsonl(tmp_path / 'pairs.jsonl', pairs(8)); write_jsonl(tmp_path / 'more.jsonl', pairs(12))
    def job(name, pairs_file, seed, beta, lr):
        train_batches._FITS.clear()                                  # a stage kernel of its own
        return train.train_dpo(BASE, 'llama', tmp_path / pairs_file, Lora(r=4, alpha=8), opt(steps=1, seed=seed, micro_batch_fit=True),
                               tmp_path / name, tag=name, beta=beta, nll_weight=1.0, warm_start=warm, lr=lr, report_to=[])
    a = job('dpo', 'pairs.jsonl', 0, 0.1, 1e-3)
    kept = sorted((tmp_path / 'run' / '.fits').iterdir())
    assert measured == [8] and len(kept) == 1 and json.loads(kept[0].read_text())['tag'] == 'dpo'
    b = job('arm', 'pairs.jsonl', 3, 0.3, 5e-4)
    assert measured == [8] and (b['micro_batch'], b['grad_accum']) == (4, 1)
    assert (b['fit']['seconds'], b['fit']['measured_by'], b['fit']['read_from']) == (0.0, 'dpo', str(kept[0]))
    c = job('other rows', 'more.jsonl', 0, 0.1, 1e-3)
    assert measured == [8, 12] and 'measured_by' not in c['fit'] and len(list((tmp_path / 'run' / '.fits').iterdir())) == 2
