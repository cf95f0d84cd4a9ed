"""vLLM on the GPU machine, after `install_vllm.py install` (PYTHONPATH=/tmp/vllm_site): the backend checked, then timed.

    python3 benchmarks/device/vllm_check.py --parts same adapter      # the library's two backends on the tiny base (greedy)
    python3 benchmarks/device/vllm_check.py --parts speed-small speed-moe --out $OUT/vllm_check.json

Not yet run: vLLM has not been installed on the GPU machine (see install_vllm.py). Each part runs in its own process.

Parts (each writes its entry into --out as it finishes):
  same         rsi_repro.generate with backend 'hf' and with backend 'vllm' on the tiny base (its real weights, float32 in
               both), the open-chat prompt set, greedy, the card's stop tokens: how many rows are token-identical; for each
               row that is not, the first differing position and, there, HF's two largest logits and their gap (a near-tie
               decided by rounding, or a real difference). float32 in both (--dtype).
  adapter      an r=768 LoRA (random A and B, seeded) on the tiny base: HF with the PEFT adapter unmerged against vLLM
               serving the merged checkpoint, as VLLMBackend does for ranks it cannot serve (serving.merge_lora).
  speed-small  vllm.LLM(load_format='dummy') on a ~1B Llama config (the shape of generation.py's random-1b)
  speed-moe    the same on Qwen3-MoE 30B-A3B's config (48 layers, 128 experts top-8, ~30.5 B parameters), built from the
               config alone: greedy, batches of 64 and 256 prompts of 200 random token ids, 128 new tokens each
               (ignore_eos), output tokens/s; each batch size twice, the first run paying for warm-up.
"""
import argparse, json, os, sys, tempfile, time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault('NCCL_NVLS_ENABLE', '0'); os.environ.setdefault('TORCH_SYMM_MEM_DISABLE_MULTICAST', '1')
os.environ.setdefault('NVSHMEM_DISABLE_NVLS', '1')

# Qwen/Qwen3-30B-A3B's published config.json (the values that shape the model)
QWEN3_MOE_30B_A3B = {'architectures': ['Qwen3MoeForCausalLM'], 'model_type': 'qwen3_moe', 'hidden_size': 2048, 'intermediate_size': 6144,
                     'moe_intermediate_size': 768, 'num_hidden_layers': 48, 'num_attention_heads': 32, 'num_key_value_heads': 4,
                     'head_dim': 128, 'num_experts': 128, 'num_experts_per_tok': 8, 'norm_topk_prob': True, 'decoder_sparse_step': 1,
                     'mlp_only_layers': [], 'vocab_size': 151936, 'max_position_embeddings': 40960, 'rope_theta': 1000000.0,
                     'rms_norm_eps': 1e-06, 'hidden_act': 'silu', 'tie_word_embeddings': False, 'attention_bias': False,
                     'bos_token_id': 151643, 'eos_token_id': 151645, 'torch_dtype': 'bfloat16', 'use_cache': True}
LLAMA_1B = {'architectures': ['LlamaForCausalLM'], 'model_type': 'llama', 'hidden_size': 2048, 'intermediate_size': 5632,
            'num_hidden_layers': 20, 'num_attention_heads': 16, 'num_key_value_heads': 16, 'vocab_size': 32000,
            'max_position_embeddings': 4096, 'rms_norm_eps': 1e-05, 'hidden_act': 'silu', 'rope_theta': 10000.0,
            'tie_word_embeddings': False, 'bos_token_id': 1, 'eos_token_id': 2, 'torch_dtype': 'bfloat16'}


def write_config(folder, cfg):
    folder = Path(folder); folder.mkdir(parents=True, exist_ok=True)
    (folder / 'config.json').write_text(json.dumps(cfg, indent=1))
    return str(folder)


def requests(n):
    from rsi_repro.instruments.prompts import load_prompt_set
    ps = load_prompt_set(kind='open_chat')
    return [{'id': f"{r.id}#{k}", 'messages': [{'role': 'user', 'content': r.prompt}]} for k in range(n // len(ps) + 1) for r in ps.itertuples()][:n]


def compare_rows(hf, vl, model_ref, serving, reqs):
    "Token-identity of two generations of the same requests; HF's top-2 logit gap where they first differ."
    import torch
    from rsi_repro.chat import render
    from rsi_repro.generate import load_model, load_tokenizer
    tok = load_tokenizer(model_ref)
    same, diffs = 0, []
    net = None
    for req, a, b in zip(reqs, hf.itertuples(), vl.itertuples()):
        ta, tb = tok.encode(a.response, add_special_tokens=False), tok.encode(b.response, add_special_tokens=False)
        if a.response == b.response and a.finish_reason == b.finish_reason: same += 1; continue
        k = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
        net = net or load_model(model_ref)
        prompt = list(render(req['messages'], tok, serving.max_input_tokens, serving.system_prompt).input_ids) + ta[:k]
        with torch.no_grad(): logits = net(input_ids=torch.tensor([prompt], device=net.device)).logits[0, -1].float()
        top = torch.topk(logits, 2)
        diffs.append({'id': req['id'], 'first_diff_token': k, 'hf_token': ta[k] if k < len(ta) else None, 'vllm_token': tb[k] if k < len(tb) else None,
                      'hf_top2_logits': [round(float(x), 5) for x in top.values], 'hf_top2_gap': round(float(top.values[0] - top.values[1]), 5),
                      'hf_finish': a.finish_reason, 'vllm_finish': b.finish_reason})
    return {'rows': len(reqs), 'identical_rows': same, 'differences': diffs}


def part_same(a, adapter=None):
    from rsi_repro.config import Serving, VLLMSettings
    from rsi_repro.generate import ModelRef, generate
    ref = ModelRef(str(ROOT / 'data/tiny_base'), dtype=a.dtype, adapter=adapter)
    serving = Serving(max_new_tokens=a.max_new_tokens, max_input_tokens=1024, batch_size=a.batch, shard_size=a.n,
                      merge_lora=adapter is not None, vllm=VLLMSettings(max_lora_rank=512, gpu_memory_utilization=0.3, batch_invariant=True))
    reqs = requests(a.n)
    work = Path(tempfile.mkdtemp())
    out = {}
    for backend in ('hf', 'vllm'):
        t0 = time.perf_counter()
        rows = generate(reqs, replace(ref, merge=backend == 'vllm' and adapter is not None), serving, work / backend, backend=backend, progress=False)
        out[backend] = {'seconds': round(time.perf_counter() - t0, 2), 'new_tokens': int(rows.new_tokens.sum()), 'rows': rows}
    cmp = compare_rows(out['hf']['rows'], out['vllm']['rows'], ref, serving, reqs)
    return {'model': 'data/tiny_base', 'dtype': a.dtype, 'adapter': adapter, 'max_new_tokens': a.max_new_tokens, 'batch_invariant': True,
            **{f"{b}_seconds": out[b]['seconds'] for b in out}, **{f"{b}_new_tokens": out[b]['new_tokens'] for b in out}, **cmp}


def make_adapter(folder, r=768, seed=0):
    "A PEFT LoRA of rank r on the tiny base with random, non-zero A and B (seeded), saved as a plain adapter folder."
    import torch
    from peft import get_peft_model
    from rsi_repro.config import Lora
    from rsi_repro.generate import ModelRef, load_model
    from rsi_repro.train import lora_config
    torch.manual_seed(seed)
    net = get_peft_model(load_model(ModelRef(str(ROOT / 'data/tiny_base'), dtype='float32'), 'cpu'), lora_config(Lora(r=r, alpha=2 * r), 'llama'))
    with torch.no_grad():
        for n, p in net.named_parameters():
            if 'lora_B' in n: p.normal_(0, 0.02)
    net.save_pretrained(folder)
    return str(folder)


def part_speed(a, name, cfg):
    import torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    folder = write_config(Path(tempfile.mkdtemp()) / name, cfg)
    t0 = time.perf_counter()
    llm = LLM(model=folder, load_format='dummy', skip_tokenizer_init=True, dtype='bfloat16', max_model_len=a.prompt_tokens + a.new_tokens + 16,
              gpu_memory_utilization=0.9, max_num_seqs=max(a.batches), seed=0)
    build = time.perf_counter() - t0
    g = torch.Generator().manual_seed(0)
    res = {'config': cfg, 'build_seconds': round(build, 1), 'runs': []}
    for bs in a.batches:
        prompts = [TokensPrompt(prompt_token_ids=torch.randint(100, cfg['vocab_size'] - 100, (a.prompt_tokens,), generator=g).tolist()) for _ in range(bs)]
        params = SamplingParams(temperature=0.0, max_tokens=a.new_tokens, ignore_eos=True, detokenize=False)
        for rep in range(2):
            torch.cuda.synchronize(); t0 = time.perf_counter()
            outs = llm.generate(prompts, params, use_tqdm=False)
            torch.cuda.synchronize(); dt = time.perf_counter() - t0
            n = sum(len(o.outputs[0].token_ids) for o in outs)
            res['runs'].append({'batch': bs, 'repeat': rep, 'output_tokens': n, 'seconds': round(dt, 2), 'output_tokens_per_s': round(n / dt, 1)})
            print(f"{name} batch {bs} run {rep}: {n} tokens in {dt:.2f} s = {n / dt:.1f} tok/s", flush=True)
    res['gpu_memory_utilization'] = 0.9      # vLLM takes this share of the GPU up front (weights, KV cache)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--parts', nargs='+', default=['same', 'adapter', 'speed-small', 'speed-moe'])
    ap.add_argument('--n', type=int, default=64); ap.add_argument('--batch', type=int, default=16)
    ap.add_argument('--max-new-tokens', type=int, default=64)
    ap.add_argument('--batches', type=int, nargs='+', default=[64, 256])
    ap.add_argument('--prompt-tokens', type=int, default=200); ap.add_argument('--new-tokens', type=int, default=128)
    ap.add_argument('--dtype', default='float32', help="of the tiny base in parts same/adapter, both backends ('bfloat16' if vLLM refuses float32)")
    ap.add_argument('--out', default=str(ROOT / 'benchmarks/results/vllm_check.json'))
    a = ap.parse_args()
    if len(a.parts) > 1:      # one process per part: a vllm.LLM keeps its share of GPU memory until its process ends
        import subprocess
        rest = [x for i, x in enumerate(sys.argv[1:]) if not (x == '--parts' or (i > 0 and sys.argv[1:][i - 1] == '--parts') or x in a.parts)]
        for part in a.parts:
            subprocess.run([sys.executable, __file__, '--parts', part] + rest)
        return
    out = Path(a.out); res = json.loads(out.read_text()) if out.exists() else {}
    import torch, transformers
    try: import vllm; vv = vllm.__version__
    except Exception as e: vv = f"unavailable ({type(e).__name__}: {e})"
    res['meta'] = {'vllm': vv, 'torch': torch.__version__, 'transformers': transformers.__version__,
                   'device': torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu', 'argv': sys.argv}
    for part in a.parts:
        t0 = time.perf_counter()
        try:
            if part == 'same': r = part_same(a)
            elif part == 'adapter': r = part_same(a, adapter=make_adapter(Path(tempfile.mkdtemp()) / 'r768'))
            elif part == 'speed-small': r = part_speed(a, 'llama-1b', LLAMA_1B)
            elif part == 'speed-moe': r = part_speed(a, 'qwen3-moe-30b-a3b', QWEN3_MOE_30B_A3B)
            else: sys.exit(f"unknown part {part}")
            r['ok'] = True
        except Exception as e:
            import traceback
            r = {'ok': False, 'error': traceback.format_exc()[-3000:]}
        r['wall_seconds'] = round(time.perf_counter() - t0, 1)
        res[part] = r
        out.parent.mkdir(parents=True, exist_ok=True); out.write_text(json.dumps(res, indent=1, default=str))
        print(part, json.dumps({k: v for k, v in r.items() if k not in ('differences', 'config')}, default=str)[:1500], flush=True)


if __name__ == '__main__':
    main()
