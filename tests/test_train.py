"Training stages on the tiny base: assistant-only labels from the trainer's own loader, DPO's zero first-step rewards, bad input."
import json
from pathlib import Path

import pytest
import torch

from rsi_repro.config import Lora, Optim
from rsi_repro.corpora import CorpusError, binarize, chat_messages, tokenize_chat, write_sft_mix
from rsi_repro.generate import AdapterMismatch, ModelRef, load_tokenizer
from rsi_repro.io import write_jsonl

ROOT = Path(__file__).resolve().parents[1]
BASE = ModelRef(str(ROOT / 'data/tiny_base'))

SINGLE = [{'role': 'user', 'content': 'What is a tuple?'}, {'role': 'assistant', 'content': 'An immutable sequence.'}]
MULTI = [{'role': 'user', 'content': 'Name a module.'}, {'role': 'assistant', 'content': 'The os module.'},
         {'role': 'user', 'content': 'What is it for?'}, {'role': 'assistant', 'content': 'Talking to the operating system.'}]


def assistant_spans(ids, tok):
    "Independent of TRL and of the template's markers: the tokens after '<|im_start|>assistant\\n' up to and including '<|im_end|>'."
    start, end = tok.convert_tokens_to_ids('<|im_start|>'), tok.convert_tokens_to_ids('<|im_end|>')
    header = tok('assistant\n', add_special_tokens=False)['input_ids']
    keep = [False] * len(ids)
    i = 0
    while i < len(ids):
        if ids[i] == start and ids[i + 1:i + 1 + len(header)] == header:
            j = i + 1 + len(header)
            while j < len(ids) and ids[j] != end: keep[j] = True; j += 1
            if j < len(ids): keep[j] = True
            i = j
        i += 1
    return keep


def test_labels_from_the_trainers_own_loader_are_assistant_only(tmp_path):
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer
    from rsi_repro.corpora import read_sft_mix
    from rsi_repro.train import load_for_training, trainer_kwargs
    tok = load_tokenizer(BASE)
    write_sft_mix([('single', SINGLE), ('multi', MULTI)], tok, 512, tmp_path / 'sft.npz')
    mix = read_sft_mix(tmp_path / 'sft.npz')
    data = Dataset.from_dict({'input_ids': mix['input_ids'], 'assistant_masks': mix['assistant_masks']})
    tok.padding_side = 'right'
    opt = Optim(lr=1e-4, micro_batch=2, grad_accum=1, seq_len=512, seed=0, steps=1)
    args = SFTConfig(**trainer_kwargs(opt, tmp_path / 'out', report_to=[]), max_length=512, packing=False)
    trainer = SFTTrainer(model=load_for_training(BASE, Lora(r=4, alpha=8), 'llama'), args=args, train_dataset=data, processing_class=tok)
    batch = next(iter(trainer.get_train_dataloader()))
    seen = 0
    for ids, labels, mask in zip(batch['input_ids'].tolist(), batch['labels'].tolist(), batch['attention_mask'].tolist()):
        real = [t for t, m in zip(ids, mask) if m]
        want = assistant_spans(real, tok)
        got = [l != -100 for l, m in zip(labels, mask) if m]
        assert got == want
        assert all(l == -100 for l, m in zip(labels, mask) if not m)            # padding never carries loss
        assert [l for l, m in zip(labels, mask) if m and l != -100] == [t for t, k in zip(real, want) if k]
        supervised = tok.decode([t for t, k in zip(real, want) if k])
        assert supervised.count('<|im_end|>') == tok.decode(real).count('<|im_start|>assistant') >= 1   # every answer learns to stop
        assert '<|im_start|>' not in supervised                                                     # no prompt or header token
        seen += 1
    assert seen == 2


def test_dpo_first_step_rewards_are_zero_with_the_peft_reference(tmp_path):
    from rsi_repro.train import train_dpo
    pairs = [{'prompt': [{'role': 'user', 'content': f'Question {i}?'}], 'chosen': [{'role': 'assistant', 'content': f'Answer {i}.'}],
              'rejected': [{'role': 'assistant', 'content': f'answer answer answer {i}'}]} for i in range(8)]
    write_jsonl(tmp_path / 'pairs.jsonl', pairs)
    opt = Optim(lr=1e-3, micro_batch=4, grad_accum=1, seq_len=128, seed=0, steps=2)
    ev = train_dpo(BASE, 'llama', tmp_path / 'pairs.jsonl', Lora(r=4, alpha=8), opt, tmp_path / 'adapter', tag='t',
                   beta=0.1, nll_weight=1.0, report_to=[])
    log = [r for r in json.loads((tmp_path / 'adapter/log_history.json').read_text()) if 'loss' in r]
    first = log[0]
    assert first['rewards/chosen'] == 0.0 and first['rewards/rejected'] == 0.0 and first['rewards/margins'] == 0.0
    assert ev['loss_type'] == ['sigmoid', 'sft'] and ev['nll_weight'] == 1.0


def test_dpo_warm_started_reference_is_the_warm_start(tmp_path):
    "With a warm start, TRL's reference is a frozen copy of the starting adapter: step-1 rewards are 0 again."
    from rsi_repro.train import train_dpo, train_sft
    tok = load_tokenizer(BASE)
    write_sft_mix([('s', SINGLE), ('m', MULTI)], tok, 256, tmp_path / 'sft.npz')
    train_sft(BASE, 'llama', tmp_path / 'sft.npz', Lora(r=4, alpha=8), Optim(lr=5e-2, micro_batch=2, grad_accum=1, seq_len=256, seed=0, steps=3),
              tmp_path / 'sft', tag='s', report_to=[])
    pairs = [{'prompt': [{'role': 'user', 'content': f'Q{i}?'}], 'chosen': [{'role': 'assistant', 'content': f'A{i}.'}],
              'rejected': [{'role': 'assistant', 'content': f'no {i}'}]} for i in range(4)]
    write_jsonl(tmp_path / 'pairs.jsonl', pairs)
    train_dpo(BASE, 'llama', tmp_path / 'pairs.jsonl', Lora(r=4, alpha=8), Optim(lr=1e-3, micro_batch=4, grad_accum=1, seq_len=128, seed=0, steps=1),
              tmp_path / 'dpo', tag='d', beta=0.1, nll_weight=1.0, warm_start=str(tmp_path / 'sft'), report_to=[])
    first = [r for r in json.loads((tmp_path / 'dpo/log_history.json').read_text()) if 'loss' in r][0]
    assert first['rewards/margins'] == 0.0


def test_corpus_row_without_an_assistant_turn_is_named():
    with pytest.raises(CorpusError, match=r"corpus tulu3 \(x\) row 12: no assistant turn"):
        chat_messages({'messages': [{'role': 'user', 'content': 'hello'}]}, 'corpus tulu3 (x) row 12')


def test_empty_preference_pair_is_named():
    with pytest.raises(CorpusError, match="uf row 5: empty chosen answer"):
        binarize({'prompt': 'q', 'chosen': [{'role': 'user', 'content': 'q'}, {'role': 'assistant', 'content': ''}],
                  'rejected': [{'role': 'user', 'content': 'q'}, {'role': 'assistant', 'content': 'r'}]}, 'uf row 5')


def test_adapter_trained_on_another_base_is_refused_when_loaded(tmp_path):
    from rsi_repro.train import train_sft
    from rsi_repro.generate import load_model
    tok = load_tokenizer(BASE)
    write_sft_mix([('s', SINGLE)], tok, 256, tmp_path / 'sft.npz')
    train_sft(BASE, 'llama', tmp_path / 'sft.npz', Lora(r=4, alpha=8), Optim(lr=1e-3, micro_batch=1, grad_accum=1, seq_len=256, seed=0, steps=1),
              tmp_path / 'adapter', tag='t', report_to=[])
    other = tmp_path / 'other_base'
    import shutil; shutil.copytree(ROOT / 'data/tiny_base', other)
    cfg = json.loads((other / 'config.json').read_text()); cfg['num_hidden_layers'] = 4; cfg['rms_norm_eps'] = 1e-6
    (other / 'config.json').write_text(json.dumps(cfg))
    with pytest.raises(AdapterMismatch, match="adapter trained on base local:"):
        load_model(ModelRef(str(other), adapter=str(tmp_path / 'adapter')), device='cpu')


def test_evidence_dataset_sha256_is_the_file_it_names(tmp_path):
    from rsi_repro.io import sha256_file
    from rsi_repro.train import read_evidence, train_sft
    tok = load_tokenizer(BASE)
    write_sft_mix([('s', SINGLE), ('m', MULTI)], tok, 256, tmp_path / 'sft.npz')
    ev = train_sft(BASE, 'llama', tmp_path / 'sft.npz', Lora(r=4, alpha=8), Optim(lr=1e-3, micro_batch=2, grad_accum=1, seq_len=256, seed=0, steps=1),
                   tmp_path / 'adapter', tag='t', report_to=[])
    assert ev['dataset_sha256'] == sha256_file(ev['dataset_path'])
    for field in ('tag', 'warm_start', 'steps', 'lr', 'r', 'alpha', 'effective_batch', 'warmup', 'schedule', 'seed',
                  'dataset_sha256', 'training_tokens', 'supervised_tokens', 'wall_seconds', 'gpu_count', 'gpu_hours', 'versions'):
        assert field in ev
    (tmp_path / 'sft.npz').write_bytes(b'changed')
    with pytest.raises(ValueError, match="no longer hashes"): read_evidence(tmp_path / 'adapter')


def test_nemotron_h_target_set_is_accepted_by_peft():
    "A scaled-down random Nemotron-H: PEFT wraps every target of the profile's set, and no routed expert."
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM
    from transformers.models.nemotron_h import NemotronHConfig
    from rsi_repro.train import lora_config
    cfg = NemotronHConfig(vocab_size=256, hidden_size=64, layers_block_type=['mamba', 'moe', 'attention', 'moe'], num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16, intermediate_size=128, mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=16,
                          n_groups=1, n_routed_experts=8, n_shared_experts=1, moe_intermediate_size=32, moe_shared_expert_intermediate_size=64,
                          num_experts_per_tok=2, chunk_size=16)
    model = get_peft_model(AutoModelForCausalLM.from_config(cfg), lora_config(Lora(r=8, alpha=16), 'nemotron_h'))
    wrapped = {n.split('.lora_A')[0] for n, _ in model.named_parameters() if 'lora_A' in n}
    kinds = {w.split('.')[-1] for w in wrapped}
    assert kinds == {'q_proj', 'k_proj', 'v_proj', 'o_proj', 'in_proj', 'up_proj', 'down_proj'}
    assert all('shared_experts' in w for w in wrapped if w.split('.')[-1] in ('up_proj', 'down_proj'))


def test_a_fresh_adapter_starts_from_the_same_weights_in_every_process():
    "torch seeds its generator differently in every process; the stage's seed decides the new LoRA weights."
    import os, subprocess, sys
    code = ("import hashlib, torch\nstart = torch.initial_seed()\nfrom rsi_repro.config import Lora\n"
            "from rsi_repro.generate import ModelRef\nfrom rsi_repro.train import load_for_training\n"
            f"net = load_for_training(ModelRef({str(BASE.base)!r}), Lora(r=8, alpha=16), 'llama', seed=7)\n"
            "print(hashlib.sha256(b''.join(p.detach().numpy().tobytes() for n, p in sorted(net.named_parameters())"
            " if 'lora_' in n)).hexdigest(), start)")
    env = {**os.environ, 'PYTHONPATH': str(ROOT)}
    runs = [subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env, check=True).stdout.split()
            for _ in range(2)]
    assert runs[0][1] != runs[1][1]          # the generator started differently in the two processes ...
    assert runs[0][0] == runs[1][0]          # ... and the adapter is the same


def test_the_head_trains_at_lr_because_no_head_weight_trains(tmp_path):
    """The card's stage 4 gives "lr 1.6e-5 (head lr 1.6e-5)": one rate. Here every trainable weight is a LoRA matrix on
    the architecture's target modules, none of them the LM head or the embeddings, and the trainer has one learning
    rate: the head lr of the card is the profile's lr, with nothing separate to set."""
    from rsi_repro.train import LORA_TARGETS, load_for_training, trainer_kwargs
    net = load_for_training(BASE, Lora(r=4, alpha=8), 'llama')
    trainable = [n for n, p in net.named_parameters() if p.requires_grad]
    assert trainable and all('lora_' in n for n in trainable)
    assert not [n for n in trainable if 'lm_head' in n or 'embed' in n]
    assert not {'lm_head', 'embed_tokens'} & {m for ms in LORA_TARGETS.values() for m in ms}
    kw = trainer_kwargs(Optim(lr=1.6e-5, micro_batch=2, grad_accum=24, seq_len=2048, seed=203, steps=400), tmp_path)
    assert kw['learning_rate'] == 1.6e-5 and not any('head' in k for k in kw)


def test_a_run_trains_with_subnormal_floats_flushed_and_leaves_the_default_after(tmp_path):
    "Subnormals cost x86 CPUs many times a normal operation (the demo's second DPO arm: 74.5 s against 20.6 s flushed)."
    from transformers import TrainerCallback
    from rsi_repro.train import train_sft
    subnormal, seen = torch.tensor([1e-39]), []
    class Look(TrainerCallback):
        def on_step_end(self, args, state, control, **kw): seen.append((subnormal * 1.0).item())
    tok = load_tokenizer(BASE)
    write_sft_mix([('s', SINGLE), ('m', MULTI)], tok, 256, tmp_path / 'sft.npz')
    can_flush = torch.set_flush_denormal(True); torch.set_flush_denormal(False)
    train_sft(BASE, 'llama', tmp_path / 'sft.npz', Lora(r=4, alpha=8), Optim(lr=1e-3, micro_batch=2, grad_accum=1, seq_len=256, seed=0, steps=2),
              tmp_path / 'adapter', tag='t', report_to=[], callbacks=[Look()])
    assert len(seen) == 2 and all((x == 0.0) == can_flush for x in seen)   # flushed in every step, where the CPU can
    assert (subnormal * 1.0).item() > 0.0                                   # the IEEE default again after the run


def test_a_diverging_run_stops_at_its_first_non_finite_step_and_writes_no_adapter(tmp_path):
    "A learning rate far too high: the loss turns non-finite, the run stops there in one line, and no adapter is left."
    from rsi_repro.train import Diverged, check_finite_adapter, train_sft
    tok = load_tokenizer(BASE)
    write_sft_mix([('s', SINGLE), ('m', MULTI)] * 4, tok, 256, tmp_path / 'sft.npz')
    with pytest.raises(Diverged, match=r"t: at step \d+ the (loss|gradient norm) is (nan|inf); no adapter was written; the learning rate \(1e\+12\)"):
        train_sft(BASE, 'llama', tmp_path / 'sft.npz', Lora(r=4, alpha=8), Optim(lr=1e12, micro_batch=2, grad_accum=1, seq_len=256, seed=0,
                  steps=6, max_grad_norm=1e30), tmp_path / 'adapter', tag='t', report_to=[])
    assert not (tmp_path / 'adapter' / 'adapter_model.safetensors').exists() and not (tmp_path / 'adapter' / 'training_evidence.json').exists()


def test_an_adapter_with_a_non_finite_weight_is_refused_as_a_warm_start(tmp_path):
    from safetensors.torch import load_file, save_file
    from rsi_repro.train import Diverged, load_for_training, train_sft
    tok = load_tokenizer(BASE)
    write_sft_mix([('s', SINGLE)], tok, 256, tmp_path / 'sft.npz')
    train_sft(BASE, 'llama', tmp_path / 'sft.npz', Lora(r=4, alpha=8), Optim(lr=1e-3, micro_batch=1, grad_accum=1, seq_len=256, seed=0, steps=1),
              tmp_path / 'adapter', tag='t', report_to=[])
    f = tmp_path / 'adapter' / 'adapter_model.safetensors'
    w = load_file(f); name = sorted(w)[0]; w[name].view(-1)[0] = float('nan'); save_file(w, f)
    with pytest.raises(Diverged, match=f"tensor {name} holds 1 non-finite value"):
        load_for_training(BASE, Lora(r=4, alpha=8), 'llama', warm_start=str(tmp_path / 'adapter'))
