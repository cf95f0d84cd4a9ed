"""The fast-training settings change how a step's work is cut, never what it computes: the same loss and gradients as
the plain path (tiny bases on the CPU; one GPU test of the split fit, skipped without CUDA)."""
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from rsi_repro.config import Lora, Optim, ProfileError, load_profile
from rsi_repro.corpora import chat_messages, write_sft_mix
from rsi_repro.generate import ModelRef, load_tokenizer
from rsi_repro.io import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
BASE = ModelRef(str(ROOT / 'data/tiny_base'))


@pytest.fixture(autouse=True)
def fresh_dynamo():
    "Each test compiles from nothing: one process's compiled entries are shared by every model's layers, so a test's would count against the next's limit."
    yield
    torch._dynamo.reset()


def grad_recorder():
    "A callback keeping the LoRA gradients of every optimiser step (after accumulation, before the update)."
    from transformers import TrainerCallback
    class Grads(TrainerCallback):
        def __init__(self): self.steps = []
        def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
            self.steps.append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad})
    return Grads()


def mix(tmp_path, n, seq_len=256, base=BASE):
    "An SFT mix of the first `n` rows of the tulu sample (lengths vary from a few dozen tokens to a few hundred)."
    tok = load_tokenizer(base)
    rows = read_jsonl(ROOT / 'data/corpora/tulu_sample.jsonl')[:n]
    path = tmp_path / f'mix{n}.npz'
    stats = write_sft_mix([(r['id'], chat_messages(r, r['id'])) for r in rows], tok, seq_len, path)
    assert stats.examples == n, stats                      # every row fits, so each step's rows are known
    return path


def run(tmp_path, name, path, optim, base=BASE, arch='llama', lora=Lora(r=8, alpha=16), callbacks=()):
    from rsi_repro.train import train_sft
    grads = grad_recorder()
    ev = train_sft(base, arch, path, lora, optim, tmp_path / name, tag=name, report_to=[], callbacks=[grads, *callbacks])
    losses = [r['loss'] for r in json.loads((tmp_path / name / 'log_history.json').read_text()) if 'loss' in r]
    return ev, losses, grads.steps


def close(a: dict, b: dict, rtol=5e-4):
    """Every tensor of `a` equals `b`'s: ||a - b|| <= rtol * max(||a||, ||b||). Float32 sums taken in another order (another
    split of the same rows) differ by ~1e-4 of the norm; the steps after the first, which start from weights Adam moved
    by about the sign of each gradient element (float noise flips the sign of elements near 0), are held to 5e-3. The
    weights themselves are not compared for that reason: the losses of the later steps show they agree."""
    assert a.keys() == b.keys()
    for k in a:
        err, scale = (a[k] - b[k]).norm().item(), max(a[k].norm().item(), b[k].norm().item())
        assert err <= rtol * scale + 1e-12, (k, err, scale)


def optim(**kw):
    base = dict(lr=1e-3, micro_batch=2, grad_accum=4, seq_len=256, seed=3, steps=1, warmup=0.0, schedule='constant')
    return Optim(**{**base, **kw})


def test_padding_free_and_another_split_give_the_plain_step(tmp_path):
    "One optimiser step over 8 rows: micro-batch 2 x 4 padded (plain) against 4 x 2 padding-free: same loss and gradients."
    path = mix(tmp_path, 8)
    ev0, loss0, g0 = run(tmp_path, 'plain', path, optim())
    ev1, loss1, g1 = run(tmp_path, 'fast', path, optim(micro_batch=4, grad_accum=2, padding_free=True))
    assert ev1['micro_batch'] == 4 and ev1['grad_accum'] == 2 and ev0['micro_batch'] == 2
    assert ev0['training_tokens'] == ev1['training_tokens'] and ev0['supervised_tokens'] == ev1['supervised_tokens']
    assert ev1['padded_tokens'] == ev1['training_tokens'] < ev0['padded_tokens']          # nothing padded
    assert loss0 == pytest.approx(loss1, rel=1e-5)
    close(g0[0], g1[0])


def test_length_grouping_keeps_every_steps_rows(tmp_path):
    """Three steps over 24 rows, grouped by length: micro-batch 1 (no padding at all) against 4 x 2 and 8 x 1 with the
    rows of each step grouped by length: the same losses step by step and the same gradients."""
    path = mix(tmp_path, 24)
    runs = [run(tmp_path, f'g{m}', path, optim(micro_batch=m, grad_accum=8 // m, steps=3, length_grouping=True)) for m in (1, 4, 8)]
    (ev1, l1, g1), rest = runs[0], runs[1:]
    assert ev1['padded_tokens'] == ev1['training_tokens']
    for ev, l, g in rest:
        assert ev['training_tokens'] == ev1['training_tokens']
        assert l == pytest.approx(l1, rel=1e-5)
        close(g1[0], g[0])
        for a, b in zip(g1[1:], g[1:]): close(a, b, 5e-3)
    assert runs[1][0]['padded_tokens'] < runs[2][0]['padded_tokens']    # grouped micro-batches of 4 pad less than one of 8


def test_length_grouping_over_steps_trains_the_samplers_steps(tmp_path):
    """`length_grouping_steps: 3` over 24 rows (one group of three steps of 8): micro-batch 4 x 2 against 1 x 8 (no
    padding) gives the same losses and gradients step by step, so each step trained the rows the sampler gave it
    whatever the split; it pads less than grouping within each step, whose steps hold other rows."""
    from rsi_repro.train import StepGroupedSampler
    path = mix(tmp_path, 24)
    over = [run(tmp_path, f'o{m}', path, optim(micro_batch=m, grad_accum=8 // m, steps=3, length_grouping=True,
                                               length_grouping_steps=3)) for m in (1, 4)]
    (ev1, l1, g1), (ev4, l4, g4) = over
    ev_in, l_in, _ = run(tmp_path, 'in4', path, optim(micro_batch=4, grad_accum=2, steps=3, length_grouping=True))
    assert ev1['padded_tokens'] == ev1['training_tokens'] == ev4['training_tokens']
    assert l4 == pytest.approx(l1, rel=1e-5)
    close(g1[0], g4[0])
    for a, b in zip(g1[1:], g4[1:]): close(a, b, 5e-3)
    assert ev4['padded_tokens'] < ev_in['padded_tokens'] and l4 != pytest.approx(l_in, rel=1e-5)
    import numpy as np
    lengths = np.diff(np.load(path)['offsets']).tolist()       # each step's rows: 8 neighbours in length among the 24
    order, ranked = StepGroupedSampler(lengths, 8, 3, steps_per_group=3).order(0), sorted(lengths, reverse=True)
    assert sorted(sorted((lengths[i] for i in order[k:k + 8]), reverse=True) for k in (0, 8, 16)) == \
        sorted(ranked[k:k + 8] for k in (0, 8, 16))


def tiny_base(tmp_path, arch):
    "A random tiny base of another architecture, with the tiny base's tokenizer."
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(BASE.base)
    common = dict(vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    if arch == 'nemotron_h':
        from transformers.models.nemotron_h import NemotronHConfig
        cfg = NemotronHConfig(hidden_size=64, layers_block_type=['mamba', 'moe', 'attention', 'mamba'], num_attention_heads=4,
                              num_key_value_heads=2, head_dim=16, intermediate_size=128, mamba_num_heads=4, mamba_head_dim=16,
                              ssm_state_size=16, n_groups=1, n_routed_experts=8, n_shared_experts=1, moe_intermediate_size=32,
                              moe_shared_expert_intermediate_size=64, num_experts_per_tok=2, chunk_size=16, **common)
    else:
        from transformers import Qwen3MoeConfig
        cfg = Qwen3MoeConfig(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2, max_position_embeddings=1024, **common)
    torch.manual_seed(0)
    path = tmp_path / arch
    AutoModelForCausalLM.from_config(cfg).save_pretrained(path); tok.save_pretrained(path)
    return ModelRef(str(path))


def test_padding_free_on_a_mixture_of_experts_with_grouped_query_attention(tmp_path):
    "Qwen3-MoE shaped (the 30B-A3B base's kinds, tiny): padding-free micro-batch 8 against padded micro-batch 2 x 4."
    base = tiny_base(tmp_path, 'qwen3_moe')
    path = mix(tmp_path, 8, base=base)
    _, loss0, g0 = run(tmp_path, 'plain', path, optim(), base, 'qwen3_moe')
    _, loss1, g1 = run(tmp_path, 'fast', path, optim(micro_batch=8, grad_accum=1, padding_free=True), base, 'qwen3_moe')
    assert loss0 == pytest.approx(loss1, rel=1e-5)
    close(g0[0], g1[0])


def test_nemotron_h_grouped_but_never_padding_free(tmp_path):
    "Nemotron-H (Mamba, MoE, attention; tiny): grouped micro-batches of 4 equal micro-batch 1; padding-free is refused."
    from rsi_repro.train import train_sft
    base = tiny_base(tmp_path, 'nemotron_h')
    path = mix(tmp_path, 8, base=base)
    _, l1, g1 = run(tmp_path, 'm1', path, optim(micro_batch=1, grad_accum=8, steps=2, length_grouping=True), base, 'nemotron_h')
    _, l4, g4 = run(tmp_path, 'm4', path, optim(micro_batch=4, grad_accum=2, steps=2, length_grouping=True), base, 'nemotron_h')
    assert l1 == pytest.approx(l4, rel=1e-5)
    close(g1[0], g4[0])
    for a, b in zip(g1[1:], g4[1:]): close(a, b, 5e-3)
    with pytest.raises(ValueError, match="Mamba state"):
        train_sft(base, 'nemotron_h', path, Lora(r=8, alpha=16), optim(padding_free=True), tmp_path / 'pf', tag='pf', report_to=[])


def test_micro_batches_padded_to_a_multiple_train_as_unpadded_ones(tmp_path):
    """`optim.pad_to_multiple_of` on Nemotron-H (right padding, masked out of the loss, behind every real token of a causal
    model): each micro-batch's length a multiple of 16, more padded tokens, the same losses and gradients as unpadded."""
    base = tiny_base(tmp_path, 'nemotron_h')
    path = mix(tmp_path, 8, base=base)
    step = optim(micro_batch=4, grad_accum=2, steps=2, length_grouping=True)
    ev0, l0, g0 = run(tmp_path, 'unpadded', path, step, base, 'nemotron_h')
    ev16, l16, g16 = run(tmp_path, 'pad16', path, replace(step, pad_to_multiple_of=16), base, 'nemotron_h')
    assert ev16['optim_settings']['pad_to_multiple_of'] == 16
    assert ev16['training_tokens'] == ev0['training_tokens'] and ev16['padded_tokens'] > ev0['padded_tokens']
    assert ev0['padded_tokens'] % 64 != 0 and ev16['padded_tokens'] % 64 == 0    # 4 rows a micro-batch, each micro-batch a multiple of 16 long
    assert l16 == pytest.approx(l0, rel=1e-5)
    close(g0[0], g16[0])
    for a, b in zip(g0[1:], g16[1:]): close(a, b, 5e-3)
    with pytest.raises(ProfileError, match="pad_to_multiple_of"):
        replace(step, length_grouping=False, padding_free=True, pad_to_multiple_of=16).validate('p.yaml', 'sft.optim')


def test_bf16_lora_inputs_are_the_same_computation_under_autocast():
    """Under bf16 autocast the LoRA branch computes in bf16 whether or not its input is first up-cast to fp32 (PEFT's
    default): the gradients are bit-identical; both match an fp32 run within bf16's tolerance."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from rsi_repro.train import lora_bf16_inputs
    torch.manual_seed(0)
    ids = torch.randint(2, 2000, (4, 48))

    def grads(dtype, autocast, plain_inputs):
        torch.manual_seed(1)
        base = AutoModelForCausalLM.from_pretrained(BASE.base, dtype=dtype)
        net = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules=['q_proj', 'v_proj', 'o_proj'], init_lora_weights=False))
        if plain_inputs: assert lora_bf16_inputs(net) == 6 * 3
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=autocast):
            loss = net(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.item(), {n: p.grad.float() for n, p in net.named_parameters() if p.requires_grad}

    l_cast, g_cast = grads(torch.bfloat16, True, False)
    l_bf16, g_bf16 = grads(torch.bfloat16, True, True)
    l_fp32, g_fp32 = grads(torch.float32, False, False)
    assert l_cast == l_bf16 and all(torch.equal(g_cast[k], g_bf16[k]) for k in g_cast)
    assert l_bf16 == pytest.approx(l_fp32, rel=1e-2)
    for k in g_fp32:
        err = (g_bf16[k] - g_fp32[k]).norm() / g_fp32[k].norm()
        assert err < 5e-2, (k, err.item())


def test_micro_batch_fit_without_cuda_keeps_the_profiles_split(tmp_path):
    if torch.cuda.is_available(): pytest.skip('measures on the GPU there')
    path = mix(tmp_path, 4)
    ev, *_ = run(tmp_path, 'fit', path, optim(micro_batch=2, grad_accum=2, micro_batch_fit=True, activation_checkpointing='auto'))
    assert (ev['micro_batch'], ev['grad_accum'], ev['activation_checkpointing']) == (2, 2, False)
    assert ev['fit'] == {'skipped': 'no CUDA device'}


def test_micro_batch_fit_refuses_several_processes(tmp_path, monkeypatch):
    from rsi_repro.train import resolve_split
    monkeypatch.setenv('WORLD_SIZE', '2')
    with pytest.raises(ValueError, match="measures one GPU"):
        resolve_split(None, None, lambda: (None, [1]), optim(micro_batch_fit=True), 0, 1)


def test_the_profile_refuses_what_cannot_work(tmp_path):
    import yaml
    prof = yaml.safe_load((ROOT / 'configs/nemotron.yaml').read_text())
    def load(edit):
        p = json.loads(json.dumps(prof)); edit(p)
        (tmp_path / 'p.yaml').write_text(yaml.safe_dump(p))
        return load_profile(tmp_path / 'p.yaml', check_files=False)
    with pytest.raises(ProfileError, match="rounds.optim.padding_free: nemotron_h has Mamba layers"):
        load(lambda p: p['rounds']['optim'].update(padding_free=True, length_grouping=False, pad_to_multiple_of=1))
    with pytest.raises(ProfileError, match="rounds.optim.pad_to_multiple_of: padding_free batches are one row"):
        load(lambda p: p['rounds']['optim'].update(padding_free=True, length_grouping=False))      # the profile pads to 16
    with pytest.raises(ProfileError, match="dpo.optim.padding_free: TRL's DPO pads every pair"):
        load(lambda p: p['dpo']['optim'].update(padding_free=True, length_grouping=False))
    assert load(lambda p: p['dpo']['optim'].update(micro_batch_fit=True, activation_checkpointing='auto')).dpo.optim.micro_batch_fit



def oom_above(micro_batch, at_step):
    "A callback that fails like a GPU out of memory at `at_step` in every run whose micro-batch is above `micro_batch`."
    from transformers import TrainerCallback
    class OOM(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if args.per_device_train_batch_size > micro_batch and state.global_step == at_step:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (fake)")
    return OOM()


def test_a_run_out_of_memory_starts_again_at_the_next_split(tmp_path):
    """A run that dies of CUDA out-of-memory at step 2 at micro-batch 4 starts again from its first weights at 2 x 4:
    its losses and gradients are a plain 2 x 4 run's, and the evidence records the split that failed and where."""
    path = mix(tmp_path, 8)
    ev, losses, grads = run(tmp_path, 'retry', path, optim(micro_batch=4, grad_accum=2, steps=3), callbacks=[oom_above(2, 2)])
    assert (ev['micro_batch'], ev['grad_accum']) == (2, 4)
    assert ev['oom_retries'] == [{'micro_batch': 4, 'grad_accum': 2, 'activation_checkpointing': False,
                                  'error': 'CUDA out of memory. Tried to allocate 20.00 GiB (fake)', 'at_step': 2}]
    ev0, losses0, grads0 = run(tmp_path, 'plain', path, optim(micro_batch=2, grad_accum=4, steps=3))
    assert 'oom_retries' not in ev0 and len(losses) == len(losses0) == 3
    assert losses == losses0                                   # the same run, from the same first weights
    assert len(grads) == 2 + 3                                 # two steps of the failed run were recorded too ...
    for a, b in zip(grads[2:], grads0): close(a, b, 1e-6)      # ... then the retry's steps are the plain run's


def test_a_dpo_run_out_of_memory_falls_back_with_its_reference(tmp_path, monkeypatch):
    "DPO falls back the same way (the reference adapter TRL copies is rebuilt from the first weights): the plain 1 x 4 losses."
    from rsi_repro.io import write_jsonl
    from rsi_repro.train import train_dpo
    pairs = [{'prompt': [{'role': 'user', 'content': f'Question {i}?'}], 'chosen': [{'role': 'assistant', 'content': f'Answer {i}.'}],
              'rejected': [{'role': 'assistant', 'content': f'answer answer {" ".join(["x"] * i)}'}]} for i in range(8)]
    write_jsonl(tmp_path / 'pairs.jsonl', pairs)
    kw = dict(beta=0.1, nll_weight=1.0, report_to=[])
    import rsi_repro.train as train
    real = train.train_and_record
    def with_oom(trainer, *a, **k):                           # DPO takes no callbacks: the fake failure goes in here
        trainer.add_callback(oom_above(1, 1)); return real(trainer, *a, **k)
    monkeypatch.setattr(train, 'train_and_record', with_oom)
    ev = train_dpo(BASE, 'llama', tmp_path / 'pairs.jsonl', Lora(r=4, alpha=8), optim(micro_batch=2, grad_accum=2, steps=2, seq_len=128),
                   tmp_path / 'dpo', tag='dpo', **kw)
    monkeypatch.undo()
    assert (ev['micro_batch'], ev['grad_accum'], [r['micro_batch'] for r in ev['oom_retries']]) == (1, 4, [2])
    train_dpo(BASE, 'llama', tmp_path / 'pairs.jsonl', Lora(r=4, alpha=8), optim(micro_batch=1, grad_accum=4, steps=2, seq_len=128),
              tmp_path / 'plain', tag='plain', **kw)
    loss = lambda d: [r['loss'] for r in json.loads((tmp_path / d / 'log_history.json').read_text()) if 'loss' in r]
    assert loss('dpo') == loss('plain')


@pytest.mark.gpu
def test_micro_batch_fit_on_a_gpu_starts_from_the_same_weights(tmp_path):
    "On a GPU the fit measures splits, then trains from the weights it started with: the first step equals a plain run's."
    path = mix(tmp_path, 16)
    fast = optim(micro_batch=2, grad_accum=8, steps=2, bf16=True, micro_batch_fit=True, activation_checkpointing='auto',
                 length_grouping=True, lora_compute='bf16')
    ev, losses, grads = run(tmp_path, 'fit', path, fast)
    assert ev['micro_batch'] * ev['grad_accum'] == 16 and ev['activation_checkpointing'] is False
    assert ev['fit']['candidates'][0]['micro_batch'] == 16 and all(r['peak_gib'] for r in ev['fit']['candidates'] if r['seconds_per_step'])
    plain = optim(micro_batch=ev['micro_batch'], grad_accum=ev['grad_accum'], steps=2, bf16=True, length_grouping=True)
    _, losses0, grads0 = run(tmp_path, 'plain', path, plain)
    assert losses == pytest.approx(losses0, rel=1e-3)
    from rsi_repro.train import RESERVED_FRACTION
    mem = ev['memory']                        # the run's own memory, under the training process's cap
    assert mem['reserved_fraction'] == pytest.approx(RESERVED_FRACTION, abs=1e-6) and 0 < mem['peak_allocated_gib'] <= mem['peak_reserved_gib']
    assert mem['peak_reserved_gib'] <= RESERVED_FRACTION * mem['gpu_gib'] and mem['cache_flushes'] >= 0
    assert torch.cuda.get_per_process_memory_fraction(0) == 1.0          # put back once the stage is done


@pytest.mark.gpu
def test_a_training_process_holds_its_allocator_cache_under_the_cap(monkeypatch):
    """Inside `reserved_memory_held` the allocator frees its cached blocks rather than reserve past the cap, and fails a
    request the cap cannot hold; on leaving, the process is as it was. The user's own allocator setting (here: segments
    that do not grow in place) is kept, so every freed block of a new size stays cached until the cap makes it go."""
    from rsi_repro.train import memory_mark, memory_since, reserved_memory_held
    monkeypatch.setenv('PYTORCH_CUDA_ALLOC_CONF', 'expandable_segments:False')
    gib = 2**30
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    fraction = (torch.cuda.memory_reserved(0) + 6 * gib) / total         # 6 GiB above what this process holds now
    with reserved_memory_held(fraction) as held:
        assert held == {'reserved_fraction': pytest.approx(fraction), 'expandable_segments': None}
        mark = memory_mark()
        for i in range(40):                  # 36 GiB of blocks, each of a new size, each freed: uncapped, the cache keeps them
            x = torch.empty((200 + 37 * i) * 2**20, dtype=torch.uint8, device='cuda'); del x
        used = memory_since(mark)
        assert used['peak_reserved_gib'] * gib <= fraction * total + 0.01 * gib and used['cache_flushes'] > 0
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(7 * gib, dtype=torch.uint8, device='cuda')
    assert torch.cuda.get_per_process_memory_fraction(0) == 1.0
    torch.empty(7 * gib, dtype=torch.uint8, device='cuda')             # the cap is gone with the context
    torch.cuda.empty_cache()


@pytest.fixture
def liger_undone():
    "Liger patches the architecture's module (its norm class, its rotary function) for the whole process: put it back after."
    import importlib
    mods = [importlib.import_module(f'transformers.models.{a}.modeling_{a}') for a in ('llama', 'qwen3_moe')]
    saved = [dict(vars(m)) for m in mods]
    yield
    for m, names in zip(mods, saved):
        for k, v in names.items(): setattr(m, k, v)


@pytest.mark.gpu
@pytest.mark.parametrize('kernels', ['liger', 'compile'])
@pytest.mark.parametrize('arch', ['llama', 'qwen3_moe'])
def test_liger_kernels_train_as_the_plain_layers_do(tmp_path, arch, kernels, liger_undone):
    """`optim.kernels: liger` (Liger's RMSNorm and rotary kernels in the base's layers, the experts still ours), and
    `compile` (torch.compile of the norms and the experts' activations): on a GPU, three bf16 steps give the plain run's
    losses within bf16's noise, the evidence counts the modules that ran the fused layers, and the DPO arms' shared
    reference pass runs the same layers (the trainer alone would apply Liger's only inside `train()`, which the reference
    pass never calls). The plain run goes first: Liger's patches outlive a run."""
    if kernels == 'liger': pytest.importorskip('liger_kernel')
    from rsi_repro.io import write_jsonl
    from rsi_repro.train import dpo_reference
    base = BASE if arch == 'llama' else tiny_base(tmp_path, arch)
    path = mix(tmp_path, 24, base=base)
    plain = optim(micro_batch=4, grad_accum=2, steps=3, bf16=True)
    ev0, losses0, _ = run(tmp_path, 'plain', path, plain, base=base, arch=arch)
    ev, losses, _ = run(tmp_path, kernels, path, replace(plain, kernels=kernels), base=base, arch=arch)
    assert 'kernel_modules' not in ev0 and ev['optim_settings']['kernels'] == kernels
    assert ev['kernel_modules'] >= (1 if kernels == 'compile' else 2) * base_layers(base)   # a compiled layer; Liger's two norms a layer
    assert losses == pytest.approx(losses0, rel=2e-2)
    write_jsonl(tmp_path / 'pairs.jsonl', [{'prompt': [{'role': 'user', 'content': f'Name colour {i}.'}],
                                            'chosen': [{'role': 'assistant', 'content': 'Blue.'}],
                                            'rejected': [{'role': 'assistant', 'content': 'Seven.' * (i + 1)}]} for i in range(4)])
    ref = json.loads(dpo_reference(base, arch, tmp_path / 'pairs.jsonl', Lora(r=8, alpha=16), replace(plain, kernels=kernels),
                                   warm_start=str(tmp_path / kernels)).read_text())
    assert ref['key']['kernels'] == kernels and ref['kernel_modules'] == ev['kernel_modules'] and ref['kept'] == 4



def test_dpo_with_compiled_layers_trains_as_the_plain_layers_do(tmp_path):
    """DPO on Nemotron-H with `optim.kernels: compile` (each attention and MoE layer whole): one compiled function a layer
    class meets the policy's passes with gradients and the reference's without, masks of many lengths, through layers
    beside Mamba ones; two steps give the plain run's losses, and the evidence names the regions."""
    from rsi_repro.io import write_jsonl
    from rsi_repro.train import train_dpo
    base = tiny_base(tmp_path, 'nemotron_h')
    write_jsonl(tmp_path / 'pairs.jsonl', [{'prompt': [{'role': 'user', 'content': f'Question {i}?'}],
                                            'chosen': [{'role': 'assistant', 'content': f'Answer {i}.'}],
                                            'rejected': [{'role': 'assistant', 'content': ' '.join(['no'] * (3 * i + 1))}]} for i in range(8)])
    plain = optim(micro_batch=2, grad_accum=2, steps=2, seq_len=128)
    kw = dict(beta=0.1, nll_weight=1.0, report_to=[])
    ev0 = train_dpo(base, 'nemotron_h', tmp_path / 'pairs.jsonl', Lora(r=4, alpha=8), plain, tmp_path / 'plain', tag='plain', **kw)
    ev = train_dpo(base, 'nemotron_h', tmp_path / 'pairs.jsonl', Lora(r=4, alpha=8), replace(plain, kernels='compile'),
                   tmp_path / 'compiled', tag='compiled', **kw)
    loss = lambda d: [r['loss'] for r in json.loads((tmp_path / d / 'log_history.json').read_text()) if 'loss' in r]
    assert 'kernel_modules' not in ev0 and ev['compile_regions'] == 'compile_layers_but_mamba' and ev['kernel_modules'] > 0
    assert len(loss('plain')) == 2 and loss('compiled') == pytest.approx(loss('plain'), rel=1e-5)

def base_layers(base: ModelRef) -> int:
    return json.loads((Path(base.base) / 'config.json').read_text())['num_hidden_layers']


def loss_and_grads(model, ids):
    "One forward and backward on `ids`: the loss and every parameter's gradient."
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=ids).loss; loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize('arch', ['qwen3_moe', 'nemotron_h'])
def test_lean_experts_compute_exactly_what_grouped_mm_does(tmp_path, arch):
    "The mixture-of-experts layers without transformers' expert-parallel masks: bit-identical loss and gradients."
    from transformers import AutoModelForCausalLM
    from rsi_repro.train import LEAN_EXPERTS, use_lean_experts
    model = AutoModelForCausalLM.from_pretrained(tiny_base(tmp_path, arch).base)
    ids = torch.randint(2, 2000, (3, 40))
    assert model.config._experts_implementation == 'grouped_mm'
    loss0, g0 = loss_and_grads(model, ids)
    assert use_lean_experts(model) and model.config._experts_implementation == LEAN_EXPERTS
    loss1, g1 = loss_and_grads(model, ids)
    assert loss0 == loss1 and g0.keys() == g1.keys() and all(torch.equal(g0[k], g1[k]) for k in g0)


def test_lean_experts_with_eight_copies_of_a_token_give_its_gradient_within_rounding():
    "Top-8 routing, as the card's bases use: the same loss bit for bit; the gradients sum each token's eight copies in routing order."
    from transformers import AutoModelForCausalLM, Qwen3MoeConfig
    from rsi_repro.train import use_lean_experts
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(Qwen3MoeConfig(vocab_size=128, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                                                            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                                            num_experts=16, num_experts_per_tok=8))
    ids = torch.randint(0, 128, (2, 24))
    assert model.config._experts_implementation == 'grouped_mm'
    loss0, g0 = loss_and_grads(model, ids)
    assert use_lean_experts(model)
    loss1, g1 = loss_and_grads(model, ids)
    assert loss0 == loss1 and g0.keys() == g1.keys()
    assert all(torch.allclose(g0[k], g1[k], rtol=1e-5, atol=1e-7) for k in g0)

def test_training_tokens_are_those_of_the_trained_micro_batches(tmp_path, monkeypatch):
    """A run stopped mid-epoch (2 steps of an 8-micro-batch epoch) counts exactly the micro-batches its loss was computed
    on: the data loader prepares the next batch ahead of the step that uses it, and that one must not count."""
    import trl
    seen = []
    real = trl.SFTTrainer.compute_loss
    def recorded(self, model, inputs, *a, **k):
        seen.append((int(inputs['attention_mask'].sum()), int(inputs['input_ids'].numel())))
        return real(self, model, inputs, *a, **k)
    monkeypatch.setattr(trl.SFTTrainer, 'compute_loss', recorded)
    ev, losses, _ = run(tmp_path, 'part', mix(tmp_path, 16), optim(micro_batch=2, grad_accum=2, steps=2))
    assert len(seen) == 2 * 2 and len(losses) == 2
    assert ev['training_tokens'] == sum(t for t, _ in seen) and ev['padded_tokens'] == sum(n for _, n in seen)


@pytest.mark.parametrize('arch,checkpointing,regions', [('qwen3_moe', False, None), ('qwen3_moe', True, None), ('nemotron_h', False, None),
                                                     ('nemotron_h', False, 'compile_norms_and_activations')])
def test_compiled_layers_train_as_the_plain_layers_do(tmp_path, monkeypatch, arch, checkpointing, regions):
    """`optim.kernels: compile` (each decoder layer whole on Qwen3-MoE; each attention and MoE layer whole and each Mamba
    layer's norm on Nemotron-H, whose Mamba kernels break a layer's graph; or there, with `regions`, each RMSNorm and each
    experts module's activation, the regions before): two steps over rows of many lengths give the plain run's losses and
    gradients, with activation checkpointing recomputing a compiled layer too, and the evidence counts every region as
    compiled and names which. A region left eager, or compiled wrong, fails one or the other."""
    import rsi_repro.train_setup as T
    if regions: monkeypatch.setitem(T.COMPILE_REGIONS, arch, getattr(T, regions))
    regions = T.compile_regions(arch).__name__
    base = tiny_base(tmp_path, arch)
    path = mix(tmp_path, 16, base=base)
    plain = optim(micro_batch=2, grad_accum=4, steps=2, length_grouping=True, activation_checkpointing=checkpointing)
    ev0, losses0, g0 = run(tmp_path, 'plain', path, plain, base=base, arch=arch)
    ev, losses, g = run(tmp_path, 'compiled', path, replace(plain, kernels='compile'), base=base, arch=arch)
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(base.base)
    norms = sum(m._get_name().endswith('RMSNorm') for m in model.modules())
    experts = sum(hasattr(m, 'has_gate') for m in model.modules())
    assert 'kernel_modules' not in ev0 and norms >= 2 * experts > 0
    if arch == 'qwen3_moe':
        assert ev['compile_regions'] == 'compile_decoder_layers' and ev['kernel_modules'] == base_layers(base)
    elif regions == 'compile_layers_but_mamba':
        kinds = [type(layer.mixer).__name__ for layer in model.model.layers]
        assert 0 < kinds.count('NemotronHMamba2Mixer') < len(kinds)       # both kinds of layer are in the tiny layout
        # each attention and MoE layer whole, each Mamba layer's norm, the final norm
        assert ev['compile_regions'] == regions and ev['kernel_modules'] == len(kinds) + 1
    else:
        assert ev['compile_regions'] == 'compile_norms_and_activations' and ev['kernel_modules'] == norms + experts
    assert losses == pytest.approx(losses0, rel=1e-5)
    close(g0[0], g[0], 1e-4)
    close(g0[1], g[1], 5e-3)
