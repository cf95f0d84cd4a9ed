"""Per-step tokens and times of a `multi_gpu.py` run, from the run folders the device returned; and, for SFT, how evenly the
ranks' micro-batches were sized, rebuilt on the CPU from the data order the trainer draws.

    python benchmarks/device/multi_gpu_steps.py --results benchmarks/results/multi_gpu_2.json --runs RUN_DIR [RUN_DIR ...] --mix SFT.npz

RUN_DIR: folders holding the variants' output folders (sft-single, sft-ddp-2, ...: log_history.json, step_times_rank0.json,
training_evidence.json). Fills each variant's per-step fields with `multi_gpu.step_stats` (the trainer's own per-step token
counts and rank 0's step clock) and recomputes the comparisons. For SFT it then rebuilds the micro-batches as `train_sft` builds
them (same settings, seed and mix; on the tiny base, since the model plays no part in the data order): one process draws them in
the single-process order; with N processes micro-batch i goes to rank i mod N (accelerate's batch-sampler sharding) and a short
last round is filled from the start of the order (even_batches). Where the rebuilt per-step tokens equal the trainer's logged
ones for every step, it records `padded_token_imbalance`: per step, the busier rank's padded tokens over the ranks' mean.
"""
import argparse, json, sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / 'benchmarks'))
TINY = ROOT / 'data/tiny_base'     # --tiny-base: the tiny base (its tokenizer) the runs were made with


def micro_batches(mix_path, micro_batch, profile):
    "Per SFT micro-batch (counted tokens, padded tokens) in the order one process draws them in the first epoch."
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer
    from rsi_repro.corpora import read_sft_mix
    from rsi_repro.generate import ModelRef, load_tokenizer
    from rsi_repro.train import TokenCount, load_for_training, trainer_kwargs
    ref = ModelRef(str(TINY))
    tok = load_tokenizer(ref); tok.padding_side = 'right'
    optim = replace(profile.sft.optim, micro_batch=micro_batch, grad_accum=1, bf16=False)
    kw = trainer_kwargs(optim, '/tmp/multi_gpu_steps', [], None, 10_000)
    mix = read_sft_mix(mix_path)
    data = Dataset.from_dict({'input_ids': mix['input_ids'], 'assistant_masks': mix['assistant_masks']})
    trainer = SFTTrainer(model=load_for_training(ref, profile.sft.lora, 'llama'), train_dataset=data, processing_class=tok,
                         args=SFTConfig(**kw, max_length=optim.seq_len, packing=False, assistant_only_loss=False))
    dl = trainer.get_train_dataloader()
    if hasattr(dl, 'set_epoch'): dl.set_epoch(0)
    out = []
    for batch in dl:               # counted as train_and_record counts a trained micro-batch
        c = TokenCount(); c.add(batch)
        out.append((c.tokens, int(batch['input_ids'].numel())))
    return out


def per_step(mbs, world, ga):
    "Per optimiser step: (counted tokens, [padded tokens of each rank]) for `world` processes of `ga` micro-batches each."
    k = len(mbs)
    rounds = -(-k // world)                                   # micro-batches per rank, the last round filled from the start
    order = mbs + mbs[:rounds * world - k]
    steps = []
    for s in range(0, rounds, ga):
        idx = [r * world + q for r in range(s, min(s + ga, rounds)) for q in range(world)]
        steps.append((sum(order[i][0] for i in idx), [sum(order[r * world + q][1] for r in range(s, min(s + ga, rounds))) for q in range(world)]))
    return steps


def lora_trainable(inputs, profile):
    "Trainable LoRA parameters of the runs' model shape (built on the meta device from the recorded hidden size and layers)."
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM
    from transformers.models.nemotron_h import NemotronHConfig
    from rsi_repro.generate import ModelRef, load_tokenizer
    from rsi_repro.train import lora_config
    tok = load_tokenizer(ModelRef(str(TINY))); h = inputs['hidden']
    cfg = NemotronHConfig(vocab_size=len(tok), hidden_size=h, layers_block_type=inputs['layers'], num_attention_heads=16, num_key_value_heads=2,
                          head_dim=h // 16, intermediate_size=4 * h, mamba_num_heads=h // 32, mamba_head_dim=64, ssm_state_size=128, n_groups=8,
                          n_routed_experts=32, n_shared_experts=1, moe_intermediate_size=h // 2, moe_shared_expert_intermediate_size=h,
                          num_experts_per_tok=6, chunk_size=128, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    with torch.device('meta'): m = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)   # as gpu_stages.build_base configures it
    n_all = sum(p.numel() for p in m.parameters())
    if n_all != inputs['parameters']: sys.exit(f"rebuilt shape has {n_all} parameters, the runs' model {inputs['parameters']}")
    pm = get_peft_model(m, lora_config(profile.sft.lora, 'nemotron_h'))
    return sum(p.numel() for p in pm.parameters() if p.requires_grad)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--results', required=True); ap.add_argument('--runs', nargs='+', required=True)
    ap.add_argument('--mix', required=True); ap.add_argument('--micro-batch', type=int, default=8)
    ap.add_argument('--tiny-base', help='the tiny base the runs used, if data/tiny_base has changed since')
    a = ap.parse_args()
    global TINY
    if a.tiny_base: TINY = Path(a.tiny_base)
    from multi_gpu import compare, step_stats
    from rsi_repro.config import load_profile
    from rsi_repro.io import sha256_file
    res = json.loads(Path(a.results).read_text())
    runs = res['meta'].get('runs') or [res['meta']]
    want = {m['inputs']['sft_mix']['sha256'] for m in runs if 'inputs' in m}
    if want != {sha256_file(a.mix)}: sys.exit(f"{a.mix} is not the mix the runs trained on ({want})")
    profile = load_profile(ROOT / 'configs/nemotron.yaml', check_files=False)
    mbs = micro_batches(a.mix, a.micro_batch, profile)
    model = next(m['inputs']['model'] for m in runs if 'model' in m.get('inputs', {}))
    res['meta']['lora_trainable_parameters'] = lora_trainable(model, profile)
    for stage in ('sft', 'dpo'):
        for name, r in res.get(stage, {}).items():
            if not r.get('ok'): continue
            tag = f"{stage}-{name.removesuffix('-repeat')}"
            dirs = [Path(d) / tag for d in a.runs if (Path(d) / tag / 'training_evidence.json').exists()]
            dirs = [d for d in dirs if json.loads((d / 'training_evidence.json').read_text())['wall_seconds'] == r['train_seconds']]
            if len(dirs) != 1: sys.exit(f"{stage} {name}: {len(dirs)} run folders match")
            for k in [k for k in r if k.startswith('steady_')]: del r[k]   # superseded by the full-step figures
            step_stats(dirs[0], r)
            if stage == 'sft':
                steps = per_step(mbs, r['world_size'], r['grad_accum'])[:r['steps']]
                if [t for t, _ in steps] == r.get('step_tokens'):
                    r['rebuilt_step_tokens_match'] = True
                    if r['world_size'] > 1:
                        r['padded_token_imbalance'] = [round(max(p) / (sum(p) / len(p)), 3) for _, p in steps]
                else: r['rebuilt_step_tokens_match'] = False
            print(stage, name, {k: r.get(k) for k in ('trainer_tokens', 'trainer_tokens_per_s', 'full_steps_timed', 'full_step_tokens_per_s',
                                                      'rebuilt_step_tokens_match', 'padded_token_imbalance')})
    compare(res, 2)
    res['meta']['per_step_fields_from'] = 'python ' + ' '.join([Path(sys.argv[0]).as_posix()] + sys.argv[1:])
    Path(a.results).write_text(json.dumps(res, indent=1))


if __name__ == '__main__':
    main()
