"""Model FLOPs per trained token, from a shape's config, so that every training rate can be read as a fraction of what
the GPU can do (MFU).

The formula, stated once. Per token, with the base frozen and LoRA trained:
- a frozen matrix of n = in x out weights that the token passes through: 2n forward, 2n backward (the input's gradient
  only: no weight gradient for a frozen base);
- a LoRA pair of rank r on it: 2r(in + out) forward, 4r(in + out) backward (the input's gradient and the weights');
- the attention core (QK^T and AV) over a causal context of `context` tokens: 4 x context x heads x head_dim forward,
  twice that backward;
- the Mamba-2 scan (chunked SSD, chunk Q, H heads of P, G groups of state N): 2QGN + 2QHP + 4HPN forward (the blocks
  a chunked kernel computes, masked or not), twice that backward; the short convolution 2 x conv_dim x kernel forward;
- activation checkpointing: one forward more;
- DPO with the reference computed at every step (the adapter disabled): one forward without LoRA more.
Only what a token uses counts: the experts it is routed to (top-k and the shared one), not the others. Embedding lookups,
norms, activations and the optimiser are left out (memory-bound work, a few per cent of the FLOPs). The context of a row of
L tokens averages L/2 under the causal mask; `context` is that mean over the measured rows.

`mfu(tokens_per_s, flops_per_token, peak)` is the fraction of `peak` FLOP/s that the rate's FLOPs are. The peak is the
GPU's, read both ways: the vendor's dense bf16 figure (`SPEC_PEAK`), and the one train_speed.py's `peak` variant measures.

Decoding is bound by memory, not FLOPs. `decode_bytes_per_step` counts the bytes one decode step of a batch moves from
HBM: every matrix it uses read once in bf16 (the routed experts: as many distinct ones as the batch's tokens pick, between
k when every token picks the same and E(1 - (1 - k/E)^batch) when each picks at random), the attention layers' K and V
over the context, and each
Mamba-2 layer's state read and written (float32, as vLLM keeps it for Nemotron-H, or the dtype the engine was given:
`STATE_BYTES`) with its convolution state. A
measured output rate of a batch gives decode steps per second (rate / batch; prefill included, so a lower bound), and
`hbm_fraction` the share of the GPU's bandwidth those bytes take.

    python benchmarks/flops.py --generation    # benchmarks/results/generation_hbm.json from the committed generation runs
"""

SPEC_PEAK = {'NVIDIA H200': 989.4e12, 'NVIDIA H100 80GB HBM3': 989.4e12}   # dense bf16 tensor-core FLOP/s, the vendor's figure for the SXM parts (no sparsity)
SPEC_HBM = {'NVIDIA H200': 4.8e12, 'NVIDIA H100 80GB HBM3': 3.35e12}      # HBM bytes/s, the vendor's figure for the SXM parts
# bytes an element of a Mamba layer's state takes in vLLM's cache, by serving.vllm.mamba_ssm_cache_dtype; `auto` is
# vLLM's own choice, float32 for Nemotron-H (NemotronHForCausalLMConfig in vLLM 0.26)
STATE_BYTES = {'auto': 4, 'float32': 4, 'bfloat16': 2, 'float16': 2}


def _layers(cfg: dict, architecture: str) -> list[str]:
    if architecture == 'nemotron_h': return list(cfg['layers_block_type'])
    if architecture == 'qwen3_moe': return ['attention+moe'] * cfg['num_hidden_layers']
    raise KeyError(f"no FLOP count for architecture {architecture!r}")


def matrices(cfg: dict, architecture: str, all_experts: bool = False) -> list[tuple[str, int, int, int]]:
    """Every matrix a token passes through, once per layer it is in: (name, in, out, times used per token); with
    `all_experts`, every expert the model holds instead (its parameter count). The names are the modules' own, as LoRA
    targets them; the routed experts are one fused tensor per layer (`experts.*`), which LoRA does not wrap."""
    d, out = cfg['hidden_size'], []
    attn = lambda: [('q_proj', d, cfg['num_attention_heads'] * cfg['head_dim'], 1), ('k_proj', d, cfg['num_key_value_heads'] * cfg['head_dim'], 1),
                    ('v_proj', d, cfg['num_key_value_heads'] * cfg['head_dim'], 1), ('o_proj', cfg['num_attention_heads'] * cfg['head_dim'], d, 1)]
    for kind in _layers(cfg, architecture):
        if architecture == 'qwen3_moe':
            f, k = cfg['moe_intermediate_size'], cfg['num_experts' if all_experts else 'num_experts_per_tok']
            out += attn() + [('router', d, cfg['num_experts'], 1), ('experts.gate_up_proj', d, 2 * f, k), ('experts.down_proj', f, d, k)]
        elif kind == 'attention':
            out += attn()
        elif kind == 'mamba':
            hp, gn = cfg['mamba_num_heads'] * cfg['mamba_head_dim'], cfg['n_groups'] * cfg['ssm_state_size']
            out += [('in_proj', d, 2 * hp + 2 * gn + cfg['mamba_num_heads'], 1), ('out_proj', hp, d, 1)]
        elif kind == 'moe':
            f, s, k = cfg['moe_intermediate_size'], cfg['moe_shared_expert_intermediate_size'], cfg['n_routed_experts' if all_experts else 'num_experts_per_tok']
            out += [('router', d, cfg['n_routed_experts'], 1), ('experts.up_proj', d, f, k), ('experts.down_proj', f, d, k),
                    ('up_proj', d, s, cfg.get('n_shared_experts', 1)), ('down_proj', s, d, cfg.get('n_shared_experts', 1))]
        else:
            raise KeyError(f"unknown layer kind {kind!r}")
    return out + [('lm_head', d, cfg['vocab_size'], 1)]


def core_forward(cfg: dict, architecture: str, context: float) -> float:
    "Forward FLOPs per token outside the matrices: the attention cores over `context` tokens, the Mamba-2 scans and convolutions."
    total = 0.0
    for kind in _layers(cfg, architecture):
        if 'attention' in kind:
            total += 4 * context * cfg['num_attention_heads'] * cfg['head_dim']
        if kind == 'mamba':
            h, p, g, n, q = cfg['mamba_num_heads'], cfg['mamba_head_dim'], cfg['n_groups'], cfg['ssm_state_size'], cfg['chunk_size']
            total += 2 * q * g * n + 2 * q * h * p + 4 * h * p * n + 2 * (h * p + 2 * g * n) * cfg['conv_kernel']
    return total


def training_flops_per_token(cfg: dict, architecture: str, mean_row_tokens: float, lora_r: int, targets, checkpointing: bool,
                             reference_forward: bool = False) -> dict:
    """FLOPs per trained token by the formula above, with its parts: frozen matrices, LoRA, cores, the recompute, and (DPO
    with the reference computed at every step, the adapter disabled) the reference's forward without LoRA."""
    mats = matrices(cfg, architecture)
    frozen = sum(2 * i * o * k for _, i, o, k in mats)                       # one forward through every used matrix
    lora = sum(2 * lora_r * (i + o) * k for n, i, o, k in mats if n in set(targets))
    core = core_forward(cfg, architecture, mean_row_tokens / 2)
    forward = frozen + lora + core
    reference = frozen + core if reference_forward else 0.0
    total = (frozen + frozen) + (lora + 2 * lora) + (core + 2 * core) + (forward if checkpointing else 0) + reference
    return {'flops_per_token': total, 'forward': forward, 'frozen_forward': frozen, 'lora_forward': lora, 'core_forward': core,
            'recompute': forward if checkpointing else 0.0, 'reference_forward': reference}


def mfu(tokens_per_s: float, flops_per_token: float, peak: float) -> float:
    "The fraction of the GPU's peak FLOP/s that a training rate's FLOPs are."
    return tokens_per_s * flops_per_token / peak


def expected_distinct(experts: int, k: int, tokens: int) -> float:
    "How many of `experts` a batch of `tokens` routes to, each token choosing `k` uniformly: E(1 - (1 - k/E)^tokens)."
    return experts * (1 - (1 - k / experts) ** tokens)


def decode_bytes_per_step(cfg: dict, architecture: str, batch: int, context: float, routing: str = 'uniform',
                          weight_bytes: int = 2, kv_bytes: int = 2, state_bytes: int = 4) -> dict:
    """The bytes one decode step of `batch` sequences at `context` tokens moves from HBM, by part (see above). `routing`:
    'uniform', each token picking k experts at random (what a trained router aims at), or 'shared', every token the same
    k (the fewest bytes any routing can move)."""
    experts = cfg.get('num_experts') or cfg.get('n_routed_experts')
    k = cfg['num_experts_per_tok']
    distinct = {'uniform': expected_distinct(experts, k, batch), 'shared': k}[routing]
    weights = sum(i * o * (distinct if n.startswith('experts.') else times) * weight_bytes
                  for n, i, o, times in matrices(cfg, architecture))
    kinds = _layers(cfg, architecture)
    kv = sum('attention' in kind for kind in kinds) * batch * context * 2 * cfg['num_key_value_heads'] * cfg['head_dim'] * kv_bytes
    state = 0.0
    if architecture == 'nemotron_h':
        h, p, g, n = cfg['mamba_num_heads'], cfg['mamba_head_dim'], cfg['n_groups'], cfg['ssm_state_size']
        per_seq = h * p * n * state_bytes + (h * p + 2 * g * n) * (cfg['conv_kernel'] - 1) * weight_bytes
        state = 2 * kinds.count('mamba') * batch * per_seq          # read and written
    return {'bytes': weights + kv + state, 'weights': weights, 'kv_cache': kv, 'mamba_state': state}


def hbm_fraction(output_tokens_per_s: float, batch: int, bytes_per_step: float, bandwidth: float) -> float:
    "The share of `bandwidth` that decoding at the measured rate moves (steps per second = rate / batch)."
    return output_tokens_per_s / batch * bytes_per_step / bandwidth


def state_dtype(engine_args: dict | None, where: str) -> str:
    "The Mamba state's dtype a measured engine ran with (its recorded engine arguments; `auto` where none was set)."
    dtype = (engine_args or {}).get('mamba_ssm_cache_dtype', 'auto')
    if dtype not in STATE_BYTES: raise ValueError(f"{where}: mamba_ssm_cache_dtype {dtype!r} is none of {sorted(STATE_BYTES)}")
    return dtype


def generation_table(files: dict) -> list[dict]:
    """One row per backend and batch of the generation results: the measured rate, the bytes a step moves (the Mamba
    state at the dtype that engine kept it in), and the share of its GPU's HBM. `files`: each results file's name and its
    contents; a row names its file, since two runs of one backend (another MoE config, another GPU) are otherwise alike."""
    from shapes import SHAPES
    rows = []
    for source, doc in files.items():
        meta = doc['meta']
        arch, cfg = SHAPES[meta['shape']]
        context = meta['prompt_tokens'] + meta['new_tokens'] / 2
        if meta['device'] not in SPEC_HBM: raise ValueError(f"{meta['shape']} on {meta['device']!r}: no HBM bandwidth for that GPU in SPEC_HBM")
        for name, b in doc['backends'].items():
            dtype = state_dtype(b.get('engine_args'), f"{meta['shape']} {name}")
            for batch, rate in sorted((int(k), v) for k, v in (b.get('rate') or {}).items()):
                row = {'shape': meta['shape'], 'backend': name, 'batch': batch, 'output_tokens_per_s': rate,
                       'decode_steps_per_s': round(rate / batch, 2), **({'mamba_state_dtype': dtype} if arch == 'nemotron_h' else {})}
                for routing in ('shared', 'uniform'):
                    step = decode_bytes_per_step(cfg, arch, batch, context, routing, state_bytes=STATE_BYTES[dtype])
                    row[routing] = {'gb_per_step': round(step['bytes'] / 1e9, 2), **{f'gb_{k}': round(v / 1e9, 2) for k, v in step.items() if k != 'bytes'},
                                    'hbm_fraction_of_spec': round(hbm_fraction(rate, batch, step['bytes'], SPEC_HBM[meta['device']]), 3)}
                rows.append({**row, 'device': meta['device'], 'date': meta['date'], 'file': source})
    return rows


# the committed decode runs the table reads (a run of another dtype or GPU joins the list when its file is committed)
# Not the H100's runs (generation_nemotron-h-31b_moe_*_h100.json): there a batch of 256 decodes in two waves (its KV cache
# holds 157 requests of this length), so a step is not rate / batch.
GENERATION_FILES = ['generation_qwen3-moe-30b-a3b.json', 'generation_nemotron-h-31b.json']

if __name__ == '__main__':
    import argparse, json, sys
    from pathlib import Path
    ap = argparse.ArgumentParser(description='FLOP and byte counts behind the MFU and HBM figures')
    ap.add_argument('--generation', action='store_true', help='write results/generation_hbm.json from the committed generation runs')
    a = ap.parse_args()
    if not a.generation: ap.error('nothing asked: --generation')
    results = Path(__file__).resolve().parent / 'results'
    rows = generation_table({f: json.loads((results / f).read_text()) for f in GENERATION_FILES})
    doc = {'what': "the share of its GPU's HBM bandwidth (SPEC_HBM: the vendor's figure, 4.8 TB/s for the H200, 3.35 for the H100) that decoding at each measured rate moves, "
                   "by benchmarks/flops.py's byte count (its docstring states it), for routing that sends every token to the same "
                   "experts ('shared', the fewest bytes) and at random ('uniform'), from " + ', '.join(GENERATION_FILES),
           'rows': rows}
    (results / 'generation_hbm.json').write_text(json.dumps(doc, indent=1) + '\n')
    for r in rows: print(f"{r['shape']:<20} {r['backend']:<20} b{r['batch']:<4} {r['output_tokens_per_s']:>9,.1f} tok/s  "
                         f"{r['shared']['gb_per_step']:>5.1f}-{r['uniform']['gb_per_step']:.1f} GB/step  "
                         f"{r['shared']['hbm_fraction_of_spec']:.1%}-{r['uniform']['hbm_fraction_of_spec']:.1%} of HBM")
