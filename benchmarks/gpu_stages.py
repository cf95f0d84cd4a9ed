"""Stages 1-2 on CUDA with a scaled-down, random-initialised model of the nemotron profile's architecture.

    python benchmarks/gpu_stages.py --out benchmarks/results/gpu_stages.json

Builds a Nemotron-H (Mamba-2, MoE with a shared expert, attention; the 30B-A3B base's layer kinds, scaled down),
saves it with the tiny base's tokenizer, then runs the project's own `train_sft` (LoRA on the profile's nemotron_h
target set, assistant-only loss from the mix's masks, bf16) and `train_dpo` (sigmoid + NLL, warm-started from the
SFT adapter, reference = a frozen copy of the warm start) exactly as the pipeline calls them. Records steps,
tokens/s, peak GPU memory, the first DPO step's rewards, and which modules LoRA wrapped.
"""
import argparse, json, sys, time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from rsi_repro.config import Lora, Optim, load_profile
from rsi_repro.corpora import binarize, chat_messages, write_sft_mix
from rsi_repro.generate import ModelRef, load_tokenizer
from rsi_repro.io import read_jsonl, write_jsonl
from rsi_repro.train import lora_targets, train_dpo, train_sft


def build_base(path: Path, hidden: int, layers: list[str]):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.models.nemotron_h import NemotronHConfig
    tok = AutoTokenizer.from_pretrained(ROOT / 'data/tiny_base')
    cfg = NemotronHConfig(vocab_size=len(tok), hidden_size=hidden, layers_block_type=layers, num_attention_heads=16, num_key_value_heads=2,
                          head_dim=hidden // 16, intermediate_size=4 * hidden, mamba_num_heads=hidden // 32, mamba_head_dim=64,
                          ssm_state_size=128, n_groups=8, n_routed_experts=32, n_shared_experts=1, moe_intermediate_size=hidden // 2,
                          moe_shared_expert_intermediate_size=hidden, num_experts_per_tok=6, chunk_size=128,
                          pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(path); tok.save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default=str(ROOT / 'benchmarks/results/gpu_stages.json'))
    ap.add_argument('--hidden', type=int, default=1024)
    ap.add_argument('--sft-steps', type=int, default=30)
    ap.add_argument('--dpo-steps', type=int, default=10)
    a = ap.parse_args()
    work = Path('/tmp/rsi_gpu_stages'); work.mkdir(exist_ok=True)
    prof = load_profile(ROOT / 'configs/nemotron.yaml', check_files=False)
    layers = ['mamba', 'moe', 'mamba', 'attention', 'mamba', 'moe', 'mamba', 'moe']
    n_params = build_base(work / 'base', a.hidden, layers)
    ref = ModelRef(str(work / 'base'), dtype='bfloat16')
    tok = load_tokenizer(ref)
    rows = read_jsonl(ROOT / 'data/corpora/tulu_sample.jsonl')[:480]
    mix = write_sft_mix([(r['id'], chat_messages(r, r['id'])) for r in rows], tok, 512, work / 'sft.npz')
    lora = Lora(r=64, alpha=128, targets=prof.sft.lora.targets)          # the profile's target set (default -> nemotron_h's)
    optim = Optim(lr=2e-4, micro_batch=8, grad_accum=2, seq_len=512, seed=1, steps=a.sft_steps, warmup=0.1, bf16=True,
                  activation_checkpointing=False)
    torch.cuda.reset_peak_memory_stats()
    ev_sft = train_sft(ref, 'nemotron_h', mix.path, lora, optim, work / 'sft_adapter', tag='gpu-sft', report_to=[])
    sft_peak = torch.cuda.max_memory_allocated() / 2**30
    cfg = json.loads((work / 'sft_adapter/adapter_config.json').read_text())
    sft_log = [r for r in json.loads((work / 'sft_adapter/log_history.json').read_text()) if 'loss' in r]
    pairs = [{'row': str(i), **binarize(r, f"row {i}").as_trl()} for i, r in enumerate(read_jsonl(ROOT / 'data/corpora/ultrafeedback_sample.jsonl')[:160])]
    write_jsonl(work / 'pairs.jsonl', pairs)
    torch.cuda.reset_peak_memory_stats()
    ev_dpo = train_dpo(ref, 'nemotron_h', work / 'pairs.jsonl', lora, Optim(lr=5e-5, micro_batch=8, grad_accum=2, seq_len=512, seed=2,
                       steps=a.dpo_steps, warmup=0.1, bf16=True), work / 'dpo_adapter', tag='gpu-dpo', beta=0.1, nll_weight=1.0,
                       warm_start=str(work / 'sft_adapter'), report_to=[])
    dpo_peak = torch.cuda.max_memory_allocated() / 2**30
    dpo_log = [r for r in json.loads((work / 'dpo_adapter/log_history.json').read_text()) if 'loss' in r]
    result = {
        'device': torch.cuda.get_device_name(), 'torch': torch.__version__, 'transformers': __import__('transformers').__version__,
        'peft': __import__('peft').__version__, 'trl': __import__('trl').__version__,
        'model': {'architecture': 'nemotron_h', 'layers': layers, 'hidden': a.hidden, 'parameters': n_params},
        'lora': {'r': cfg['r'], 'alpha': cfg['lora_alpha'], 'target_modules': sorted(cfg['target_modules']),
                 'profile_targets': lora_targets(lora, 'nemotron_h')},
        'sft': {k: ev_sft[k] for k in ('steps', 'effective_batch', 'training_tokens', 'supervised_tokens', 'wall_seconds', 'dataset_sha256', 'gpu_count')}
               | {'tokens_per_s': round(ev_sft['training_tokens'] / ev_sft['wall_seconds'], 1), 'peak_gib': round(sft_peak, 2),
                  'loss_first': sft_log[0]['loss'], 'loss_last': sft_log[-1]['loss']},
        'dpo': {k: ev_dpo[k] for k in ('steps', 'effective_batch', 'training_tokens', 'wall_seconds', 'warm_start')}
               | {'peak_gib': round(dpo_peak, 2), 'first_step_rewards': {k: dpo_log[0][k] for k in ('rewards/chosen', 'rewards/rejected', 'rewards/margins')},
                  'last_step_margin': dpo_log[-1]['rewards/margins'], 'loss_first': dpo_log[0]['loss'], 'loss_last': dpo_log[-1]['loss']},
    }
    print(json.dumps(result, indent=1))
    Path(a.out).parent.mkdir(parents=True, exist_ok=True); Path(a.out).write_text(json.dumps(result, indent=1))


if __name__ == '__main__':
    main()
