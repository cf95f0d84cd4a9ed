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
  sensitivity  (HF only, CPU or GPU) HF against HF with every weight moved by a relative 1e-6 and 1e-4 (seeded), for the
               base and for the r=768 merged checkpoint: how many greedy rows stay token-identical when only rounding moves
  teacher      HF's greedy outputs teacher-forced through HF and through vLLM (prompt_logprobs), base and r=768 merged: the
               distribution of |log-prob difference| at every generated position
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
sys.path.insert(0, str(ROOT / 'benchmarks'))
from shapes import QWEN3_MOE_30B_A3B  # noqa: E402
os.environ.setdefault('NCCL_NVLS_ENABLE', '0'); os.environ.setdefault('TORCH_SYMM_MEM_DISABLE_MULTICAST', '1')
os.environ.setdefault('NVSHMEM_DISABLE_NVLS', '1')

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
                      merge_lora=adapter is not None, vllm=VLLMSettings(max_lora_rank=512, gpu_memory_utilization=a.small_gpu_mem, batch_invariant=True))
    patch_llm(a)
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


def patch_llm(a):
    "Engine options the library's backend does not expose, added to its vllm.LLM(...) call (this check only)."
    import vllm
    if getattr(vllm.LLM, '_patched', False) or not (a.small_eager or a.small_kv_gib): return
    orig = vllm.LLM
    def LLM(*args, **kw):
        if a.small_eager: kw.setdefault('enforce_eager', True)
        if a.small_kv_gib: kw.setdefault('kv_cache_memory_bytes', int(a.small_kv_gib * 2**30))
        return orig(*args, **kw)
    LLM._patched = True
    vllm.LLM = LLM


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


def perturbed_copy(model_ref, folder, rel, seed=0):
    "The checkpoint with every floating weight w replaced by w * (1 + rel * N(0, 1)) (seeded): the size of a rounding difference."
    import torch
    from rsi_repro.generate import load_model, load_tokenizer
    net = load_model(model_ref, 'cpu')
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            if p.is_floating_point(): p.mul_(1 + rel * torch.randn(p.shape, generator=g, dtype=p.dtype))
    net.save_pretrained(folder); load_tokenizer(model_ref).save_pretrained(folder)
    return str(folder)


def part_sensitivity(a):
    """How far greedy text moves when the weights move by a rounding-sized amount, for the base and for the r=768 merged
    checkpoint the adapter part serves: HF against HF (no vLLM), float32, the same prompts as parts same/adapter."""
    from rsi_repro.config import Serving
    from rsi_repro.generate import ModelRef, generate, merge_adapter
    work = Path(tempfile.mkdtemp())
    base = ModelRef(str(ROOT / 'data/tiny_base'), dtype='float32')
    merged = merge_adapter(ModelRef(base.base, dtype='float32', adapter=make_adapter(work / 'r768')), work)
    serving = Serving(max_new_tokens=a.max_new_tokens, max_input_tokens=1024, batch_size=a.batch, shard_size=a.n)
    reqs = requests(a.n)
    res = {'max_new_tokens': a.max_new_tokens, 'relative_perturbations': a.rel, 'models': {}}
    for name, ref in (('base', base), ('r768_merged', merged)):
        ref_rows = generate(reqs, ref, serving, work / f'{name}-ref', backend='hf', progress=False)
        res['models'][name] = {}
        for rel in a.rel:
            moved = ModelRef(perturbed_copy(ref, work / f'{name}-{rel:g}', rel), dtype='float32')
            rows = generate(reqs, moved, serving, work / f'{name}-{rel:g}-gen', backend='hf', progress=False)
            cmp = compare_rows(ref_rows, rows, ref, serving, reqs)
            gaps = sorted(d['hf_top2_gap'] for d in cmp['differences'])
            res['models'][name][f'{rel:g}'] = {'identical_rows': cmp['identical_rows'], 'rows': cmp['rows'],
                                               'first_difference_top2_gaps': gaps}
            print(name, rel, cmp['identical_rows'], '/', cmp['rows'], 'gaps', gaps[-5:], flush=True)
    return res


def part_teacher(a):
    """vLLM's and HF's log-probabilities of the same token sequences (HF's greedy outputs, teacher-forced through both
    as prompts), base and r=768 merged: how far the two engines' numbers are apart at every position, not only where
    a greedy choice first flips."""
    import math, torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from rsi_repro.chat import render
    from rsi_repro.config import Serving, VLLMSettings
    from rsi_repro.generate import ModelRef, generate, load_model, load_tokenizer, merge_adapter, vllm_engine_args
    work = Path(tempfile.mkdtemp())
    base = ModelRef(str(ROOT / 'data/tiny_base'), dtype='float32')
    merged = merge_adapter(ModelRef(base.base, dtype='float32', adapter=make_adapter(work / 'r768')), work)
    serving = Serving(max_new_tokens=a.max_new_tokens, max_input_tokens=1024, batch_size=a.batch, shard_size=a.n,
                      vllm=VLLMSettings(max_lora_rank=512, gpu_memory_utilization=a.small_gpu_mem, batch_invariant=True, enforce_eager=True,
                                        kv_cache_gib=a.small_kv_gib or None))
    os.environ.setdefault('VLLM_BATCH_INVARIANT', '1')
    reqs = requests(a.n)
    res = {'max_new_tokens': a.max_new_tokens, 'models': {}}
    for name, ref in (('base', base), ('r768_merged', merged)):
        if name not in a.models: continue
        tok = load_tokenizer(ref)
        rows = generate(reqs, ref, serving, work / f'{name}-hf', backend='hf', progress=False)
        seqs, starts = [], []
        for req, row in zip(reqs, rows.itertuples()):
            p = list(render(req['messages'], tok, serving.max_input_tokens, serving.system_prompt).input_ids)
            seqs.append(p + tok.encode(row.response, add_special_tokens=False)); starts.append(len(p))
        net = load_model(ref)
        hf = []
        with torch.no_grad():
            for s in seqs:
                lp = torch.log_softmax(net(input_ids=torch.tensor([s], device=net.device)).logits[0].float(), -1)
                hf.append([float(lp[i - 1, s[i]]) for i in range(1, len(s))])
        del net; torch.cuda.empty_cache()
        llm = LLM(**vllm_engine_args(ref, serving))
        outs = llm.generate([TokensPrompt(prompt_token_ids=s) for s in seqs],
                            SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1), use_tqdm=False)
        deltas, row_max = [], []
        for s, st, h, o in zip(seqs, starts, hf, outs):
            v = [o.prompt_logprobs[i][s[i]].logprob if o.prompt_logprobs[i] else math.nan for i in range(1, len(s))]
            d = [abs(x - y) for x, y in zip(h[st - 1:], v[st - 1:]) if not math.isnan(y)]     # the generated positions
            deltas += d; row_max.append(max(d) if d else 0.0)
        del llm
        deltas.sort()
        q = lambda f: round(deltas[min(len(deltas) - 1, int(f * len(deltas)))], 6)
        res['models'][name] = {'positions': len(deltas), 'abs_logprob_difference': {'median': q(0.5), 'p99': q(0.99), 'max': round(deltas[-1], 6)},
                               'rows_with_max_over_0.1': sum(x > 0.1 for x in row_max), 'rows': len(row_max)}
        print(name, res['models'][name], flush=True)
    return res


def part_speed(a, name, cfg):
    import torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    folder = write_config(Path(tempfile.mkdtemp()) / name, cfg)
    t0 = time.perf_counter()
    llm = LLM(model=folder, load_format='dummy', skip_tokenizer_init=True, dtype='bfloat16', max_model_len=a.prompt_tokens + a.new_tokens + 16,
              gpu_memory_utilization=a.gpu_mem, max_num_seqs=max(a.batches), seed=0,
              **({'kv_cache_memory_bytes': int(a.kv_gib * 2**30)} if a.kv_gib else {}),
              **({'compilation_config': {'cudagraph_capture_sizes': a.capture_sizes}} if a.capture_sizes else {}))
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
    res['gpu_memory_utilization'] = a.gpu_mem      # vLLM takes this share of the GPU up front (weights, KV cache)
    res['kv_cache_gib'] = a.kv_gib or None; res['cudagraph_capture_sizes'] = a.capture_sizes
    free, total = torch.cuda.mem_get_info(); res['device_gpu_used_gib_after'] = round((total - free) / 2**30, 1)      # whole device, all processes
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--parts', nargs='+', default=['same', 'adapter', 'speed-small', 'speed-moe'])
    ap.add_argument('--n', type=int, default=64); ap.add_argument('--batch', type=int, default=16)
    ap.add_argument('--max-new-tokens', type=int, default=64)
    ap.add_argument('--batches', type=int, nargs='+', default=[64, 256])
    ap.add_argument('--prompt-tokens', type=int, default=200); ap.add_argument('--new-tokens', type=int, default=128)
    ap.add_argument('--dtype', default='float32', help="of the tiny base in parts same/adapter, both backends ('bfloat16' if vLLM refuses float32)")
    ap.add_argument('--gpu-mem', type=float, default=0.9, help='speed parts: gpu_memory_utilization')
    ap.add_argument('--kv-gib', type=float, default=0, help='speed parts: fixed KV cache size (kv_cache_memory_bytes); 0: from --gpu-mem')
    ap.add_argument('--capture-sizes', type=int, nargs='*', default=None, help='speed parts: CUDA graph batch sizes (default: vLLM\'s)')
    ap.add_argument('--small-gpu-mem', type=float, default=0.3, help='parts same/adapter: gpu_memory_utilization')
    ap.add_argument('--small-kv-gib', type=float, default=0, help='parts same/adapter: fixed KV cache size')
    ap.add_argument('--small-eager', action='store_true', help='parts same/adapter: enforce_eager (no compile, no CUDA graphs)')
    ap.add_argument('--models', nargs='+', default=['base', 'r768_merged'], help='part teacher: which checkpoints')
    ap.add_argument('--rel', type=float, nargs='+', default=[1e-6, 1e-4], help='part sensitivity: relative weight perturbations')
    ap.add_argument('--out', default=str(ROOT / 'benchmarks/results/vllm_check.json'))
    a = ap.parse_args()
    if len(a.parts) > 1:      # one process per part: a vllm.LLM keeps its share of GPU memory until its process ends
        import subprocess
        argv = sys.argv[1:]; i = argv.index('--parts'); j = i + 1
        while j < len(argv) and not argv[j].startswith('--'): j += 1
        rest = argv[:i] + argv[j:]
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
            elif part == 'sensitivity': r = part_sensitivity(a)
            elif part == 'teacher': r = part_teacher(a)
            elif part == 'speed-small': r = part_speed(a, 'llama-1b', LLAMA_1B)
            elif part == 'speed-moe': r = part_speed(a, 'qwen3-moe-30b-a3b', {**QWEN3_MOE_30B_A3B, 'use_cache': True})
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
