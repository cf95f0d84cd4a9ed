"""Output tokens/s of rsi_repro's generation backend against plain `model.generate`, on the same prompts, in one run.

    python benchmarks/generation.py                       # CPU, the tiny base
    python benchmarks/generation.py --model random-1b     # GPU, a ~1B-parameter random-initialised Llama
    python benchmarks/generation.py --shape qwen3-moe-30b-a3b --backends hf vllm-invariant vllm-not-invariant --out F   # GPU, the card's shapes

With --shape (a model shape of `benchmarks/shapes.py`, random weights, bf16), the library's two backends are timed one
after the other in one run, on the same prompts (--batches of --prompt-tokens random token ids) and the same budget
(--new-tokens each; no stop tokens, so every row generates all of them):
  hf                  rsi_repro.generate's HFBackend (transformers `generate`, batches of the whole --batches size)
  vllm                rsi_repro.generate's VLLMBackend: `vllm.LLM` built by `vllm_engine_args` from the nemotron profile's
                      serving.vllm settings (batch_invariant included), `load_format='dummy'` (random weights, no checkpoint)
  vllm-not-invariant  the same with batch invariance off, vllm-invariant with it on, whatever the profile says: what
                      batch invariance costs (vLLM refuses it for Mamba-2 layers, so not on Nemotron-H)
Each vLLM variant runs in its own process (an engine keeps its GPU memory until its process ends), after the HF model is freed.
Each batch size runs --repeats times in one vLLM engine, the last run the rate (the first pays for compiles and warm-up);
HF compiles nothing, so after one untimed short batch each size runs once. A backend's runs are kept as they finish.

Three ways of decoding the same prompts greedily to the same token budget:
  plain-b1      model.generate one prompt at a time (what a first script does)
  plain-batch   model.generate on batches in the prompts' order, left padding, same stop tokens
  rsi_repro     rsi_repro.generate: same batch size, prompts sorted by length, shards written as it goes
Output tokens count the new tokens each row really produced (up to and including its stop token).
"""
import argparse, json, os, platform, signal, sys, tempfile, time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from rsi_repro.chat import render
from rsi_repro.config import Serving
from rsi_repro.generate import HFBackend, ModelRef, cut_at_stop, generate, load_tokenizer, stop_ids
from rsi_repro.instruments.prompts import load_prompt_set


def prompts(n):
    ps = load_prompt_set(kind='open_chat')
    reqs = [{'id': f"{r.id}#{k}", 'messages': [{'role': 'user', 'content': r.prompt}]} for k in range(n // len(ps) + 1) for r in ps.itertuples()]
    return reqs[:n]


def random_1b(tok, device):
    from transformers import LlamaConfig, AutoModelForCausalLM
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=2048, intermediate_size=5632, num_hidden_layers=20, num_attention_heads=16,
                      num_key_value_heads=16, max_position_embeddings=4096, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    with torch.device(device): m = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    return m.eval()


def plain(model, tok, rendered, max_new, batch, stops):
    dev = model.device
    n_out = 0
    for i in range(0, len(rendered), batch):
        chunk = [list(r.input_ids) for r in rendered[i:i + batch]]
        w = max(map(len, chunk))
        ids = torch.tensor([[tok.pad_token_id] * (w - len(p)) + p for p in chunk], device=dev)
        mask = torch.tensor([[0] * (w - len(p)) + [1] * len(p) for p in chunk], device=dev)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False,
                                 eos_token_id=stops, pad_token_id=tok.pad_token_id)
        n_out += sum(len(cut_at_stop(row[w:].tolist(), stops).token_ids) for row in out)
    return n_out


SHAPE_BACKENDS = ('hf', 'vllm', 'vllm-not-invariant', 'vllm-invariant', 'vllm-ssm-bf16')
# vllm-ssm-bf16: the profile's engine without batch invariance and with the Mamba layers' state in bfloat16
# (serving.vllm.mamba_ssm_cache_dtype), priced only for a profile that sets it: it decodes other tokens


def shape_folder(shape: str, work: Path) -> tuple[str, Path]:
    "The shape's config (with a KV cache, no end-of-sequence id: every row runs to its budget) in a folder vLLM can load."
    sys.path.insert(0, str(ROOT / 'benchmarks'))
    from shapes import SHAPES, build_config
    tok = load_tokenizer(ModelRef(str(ROOT / 'data/tiny_base')))
    arch, config = build_config(shape, tok, use_cache=True)
    config.eos_token_id = None
    config.architectures = SHAPES[shape][1]['architectures']     # without it vLLM serves the model as a pooling (embedding) model
    folder = work / shape; folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(folder)
    return arch, folder


def shape_prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(100, vocab - 100, (length,), generator=g).tolist() for _ in range(n)]


def shape_serving(a):
    "The nemotron profile's serving settings, with this benchmark's lengths and the batch each run uses."
    from rsi_repro.config import load_profile
    serving = load_profile(ROOT / 'configs/nemotron.yaml').serving
    invariant = {'vllm-not-invariant': False, 'vllm-invariant': True, 'vllm-ssm-bf16': False}.get(a.backend, serving.vllm.batch_invariant)
    vllm = replace(serving.vllm, batch_invariant=invariant)
    if a.backend == 'vllm-ssm-bf16': vllm = replace(vllm, mamba_ssm_cache_dtype='bfloat16')
    return replace(serving, max_input_tokens=a.prompt_tokens, max_new_tokens=a.new_tokens, batch_size=max(a.batches), vllm=vllm)


def time_backend(backend, prompts, a, repeats, on_run) -> list[dict]:
    from rsi_repro.generate import Decode
    decode = Decode(temperature=0.0, top_p=1.0, max_new_tokens=a.new_tokens)
    runs = []
    for bs in a.batches:
        for rep in range(repeats):
            if torch.cuda.is_available(): torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = backend.generate(prompts[:bs], decode, seed=0)
            if torch.cuda.is_available(): torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            n = sum(len(c.token_ids) for c in out)
            runs.append({'batch': bs, 'repeat': rep, 'output_tokens': n, 'seconds': round(dt, 2), 'output_tokens_per_s': round(n / dt, 1)})
            print(f"{a.backend} batch {bs} run {rep}: {n} tokens in {dt:.2f} s = {n / dt:.1f} tok/s", flush=True)
            on_run(runs)
    return runs


def run_backend(a) -> dict:
    "One backend on the shape, in this process."
    from types import SimpleNamespace
    from rsi_repro.generate import VLLMBackend, vllm_engine_args
    arch, folder = shape_folder(a.shape, Path(tempfile.gettempdir()) / 'rsi_gen_speed')
    serving = shape_serving(a)
    prompts = shape_prompts(max(a.batches), a.prompt_tokens, shape_vocab(a.shape))
    t0 = time.perf_counter()
    if a.backend == 'hf':
        from transformers import AutoConfig, AutoModelForCausalLM
        config = AutoConfig.from_pretrained(folder)
        torch.manual_seed(0)
        with torch.device('cuda' if torch.cuda.is_available() else 'cpu'):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if torch.cuda.is_available() else torch.float32).eval()
        model.generation_config.eos_token_id = None
        backend = HFBackend.__new__(HFBackend)     # the library's backend with the random model in place of a checkpoint
        backend.serving, backend.model, backend.tokenizer = serving, model, SimpleNamespace(pad_token_id=config.pad_token_id or 0)
        backend.stops = []
        engine = {'attention': getattr(model.config, '_attn_implementation', None)}
    else:
        if serving.vllm.batch_invariant: os.environ['VLLM_BATCH_INVARIANT'] = '1'    # as VLLMBackend.__init__ sets it
        from vllm import LLM
        backend = VLLMBackend.__new__(VLLMBackend)   # VLLMBackend.__init__ without the tokenizer a random model has none of
        backend.serving, backend.lora, backend.stops = serving, None, []
        kw = vllm_engine_args(ModelRef(str(folder), dtype='bfloat16'), serving)
        backend.llm = LLM(**kw, load_format='dummy', skip_tokenizer_init=True, seed=0)
        engine = {'engine_args': {k: v for k, v in kw.items() if k != 'model'}, 'load_format': 'dummy',
                  'VLLM_BATCH_INVARIANT': os.environ.get('VLLM_BATCH_INVARIANT'),
                  # a folder of fused-MoE kernel configs vLLM reads before its own (none: the configs its wheel ships)
                  'VLLM_TUNED_CONFIG_FOLDER': os.environ.get('VLLM_TUNED_CONFIG_FOLDER')}
    repeats = a.repeats
    if a.backend == 'hf':      # transformers compiles nothing: one untimed short batch warms it, then one run per batch size
        from rsi_repro.generate import Decode
        backend.generate(prompts[:8], Decode(temperature=0.0, top_p=1.0, max_new_tokens=8), seed=0); repeats = 1
    build = time.perf_counter() - t0
    def record(runs):          # after every run, so a backend stopped by --backend-timeout keeps what it measured
        free, total = torch.cuda.mem_get_info() if torch.cuda.is_available() else (0, 0)
        res = {'backend': a.backend, 'architecture': arch, 'build_seconds': round(build, 1), **engine, 'runs': runs,
               'rate': {str(bs): [r for r in runs if r['batch'] == bs][-1]['output_tokens_per_s'] for bs in a.batches
                        if any(r['batch'] == bs for r in runs)},
               'peak_gib': round(torch.cuda.max_memory_allocated() / 2**30, 1) if torch.cuda.is_available() and a.backend == 'hf' else None,
               'device_used_gib_after': round((total - free) / 2**30, 1) if total else None}
        Path(a.child_out).write_text(json.dumps(res, indent=1))
        return res
    return record(time_backend(backend, prompts, a, repeats, record))


def shape_vocab(shape):
    sys.path.insert(0, str(ROOT / 'benchmarks'))
    from shapes import SHAPES
    return SHAPES[shape][1]['vocab_size']


def shape_versions() -> dict:
    import transformers
    out = {'torch': torch.__version__, 'transformers': transformers.__version__, 'python': platform.python_version()}
    for name in ('vllm', 'mamba_ssm', 'causal_conv1d'):
        try: out[name] = __import__(name).__version__
        except Exception as e: out[name] = f'not installed ({type(e).__name__})'
    return out


def shape_rates(doc) -> dict[str, dict]:
    """The file's `rates` for `rsi-repro estimate`: `generate.<hf|vllm|vllm-invariant>[-ssm-bf16].b<batch>.<shape>`, the
    last run of each batch size; a vLLM entry is keyed by the batch invariance it ran with (its recorded
    VLLM_BATCH_INVARIANT) and the Mamba state dtype its engine was given (`rsi_repro.estimate.vllm_tag`)."""
    sys.path.insert(0, str(ROOT / 'benchmarks'))
    from shapes import ESTIMATE_SHAPES, SHAPE_WORDS
    from types import SimpleNamespace
    from rsi_repro.estimate import vllm_tag
    m = doc['meta']; shape = m['shape']
    if shape not in ESTIMATE_SHAPES: return {}
    out = {}
    for entry in doc.get('backends', {}).values():
        if 'rate' not in entry: continue
        inv = entry.get('VLLM_BATCH_INVARIANT') == '1'
        state = (entry.get('engine_args') or {}).get('mamba_ssm_cache_dtype', 'auto')
        kind = 'hf' if entry['backend'] == 'hf' else vllm_tag(SimpleNamespace(batch_invariant=inv, mamba_ssm_cache_dtype=state))
        how = ("rsi_repro.generate's HFBackend (transformers generate)" if kind == 'hf' else
               f"rsi_repro.generate's VLLMBackend (vLLM {m['versions'].get('vllm')}, load_format='dummy', batch invariance "
               f"{'on' if inv else 'off'}" + ('' if state == 'auto' else f", the Mamba layers' state in {state}") +
               ", the nemotron profile's other serving.vllm settings)")
        for bs, v in entry['rate'].items():
            key = f"generate.{kind}.b{bs}.{ESTIMATE_SHAPES[shape]}"
            if key in out: raise ValueError(f"two backends of this file give {key}; keep one of them (their batch invariance is the same)")
            out[key] = {
                'value': v, 'unit': 'output tokens/s',
                'what': (f"{how}, {SHAPE_WORDS[shape]} with random weights in bf16, {bs} prompts of {m['prompt_tokens']} random "
                         f"tokens, {m['new_tokens']} new tokens each, greedy; the last of the runs at this size; one {m['device']}; "
                         f"benchmarks/generation.py, {m['date']}")}
    return out


def main_shape(a):
    "Every --backends entry on --shape, each in a child process, merged into --out as each finishes."
    import subprocess
    out = Path(a.out)
    doc = json.loads(out.read_text()) if out.exists() else {}
    doc['meta'] = {'shape': a.shape, 'date': time.strftime('%Y-%m-%d'), 'argv': sys.argv, 'prompt_tokens': a.prompt_tokens,
                   'new_tokens': a.new_tokens, 'batches': a.batches, 'repeats': a.repeats, 'versions': shape_versions(),
                   'device': torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu'}
    doc.setdefault('backends', {})
    for b in a.backends:
        child = Path(tempfile.mkdtemp()) / 'result.json'
        cmd = [sys.executable, __file__, '--shape', a.shape, '--backend', b, '--child-out', str(child), '--prompt-tokens', str(a.prompt_tokens),
               '--new-tokens', str(a.new_tokens), '--repeats', str(a.repeats), '--batches', *map(str, a.batches)]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, start_new_session=True)     # its own process group: vLLM's engine process goes with it
        try: status = proc.wait(timeout=a.backend_timeout or None)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL); proc.wait()
            status = f'stopped after --backend-timeout {a.backend_timeout} s'
        res = json.loads(child.read_text()) if child.exists() else {'backend': b, 'error': f'no result (exit status {status})'}
        if status != 0: res['exit'] = status
        res['wall_seconds'] = round(time.perf_counter() - t0, 1)
        doc['backends'][b] = res
        doc = {'meta': doc['meta'], 'rates': shape_rates(doc), 'backends': doc['backends']}
        out.parent.mkdir(parents=True, exist_ok=True); out.write_text(json.dumps(doc, indent=1))
    print(f"\n{a.shape}: output tokens/s, {a.prompt_tokens}-token prompts, {a.new_tokens} new tokens (last run of {a.repeats})")
    print(f"{'backend':<20} " + ' '.join(f"{'batch ' + str(bs):>11}" for bs in a.batches) + f" {'build s':>8}")
    for b, r in doc['backends'].items():
        if 'error' in r: print(f"{b:<20} {r['error'][:80]}"); continue
        print(f"{b:<20} " + ' '.join(f"{r['rate'].get(str(bs), float('nan')):>11,.1f}" for bs in a.batches) + f" {r['build_seconds']:>8}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--shape', default=None, help='a shape of benchmarks/shapes.py: time the library\'s backends on it (GPU)')
    ap.add_argument('--backends', nargs='+', default=list(SHAPE_BACKENDS), choices=SHAPE_BACKENDS)
    ap.add_argument('--backend', default=None, help=argparse.SUPPRESS)
    ap.add_argument('--child-out', default=None, help=argparse.SUPPRESS)
    ap.add_argument('--batches', type=int, nargs='+', default=[64, 256])
    ap.add_argument('--prompt-tokens', type=int, default=200); ap.add_argument('--new-tokens', type=int, default=128)
    ap.add_argument('--rates-only', action='store_true', help='measure nothing: rewrite the `rates` of a --shape file (--out) from its runs')
    ap.add_argument('--backend-timeout', type=int, default=0, help='seconds one backend may take (0: no limit)')
    ap.add_argument('--model', default='tiny', choices=['tiny', 'random-1b'])
    ap.add_argument('--n', type=int, default=96)
    ap.add_argument('--max-new-tokens', type=int, default=64)
    ap.add_argument('--batch', type=int, default=16)
    ap.add_argument('--repeats', type=int, default=2, help='each method runs this many times, interleaved; the best time is reported')
    ap.add_argument('--out', default=str(ROOT / 'benchmarks/results/generation.json'))
    a = ap.parse_args()
    if a.shape and a.backend:
        run_backend(a); return
    if a.rates_only:
        doc = json.loads(Path(a.out).read_text())
        doc = {'meta': doc['meta'], 'rates': shape_rates(doc), 'backends': doc['backends']}
        Path(a.out).write_text(json.dumps(doc, indent=1))
        for k, v in doc['rates'].items(): print(f"{k}: {v['value']:,.1f} {v['unit']}")
        return
    if a.shape: return main_shape(a)
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    ref = ModelRef(str(ROOT / 'data/tiny_base'), dtype='float32' if a.model == 'tiny' else 'bfloat16')
    serving = Serving(max_new_tokens=a.max_new_tokens, max_input_tokens=1024, batch_size=a.batch, shard_size=a.batch * 4)
    reqs = prompts(a.n)
    backend = HFBackend.__new__(HFBackend)           # the project's backend, with the model under test swapped in
    backend.tokenizer, backend.serving = load_tokenizer(ref), serving
    backend.model = (random_1b(backend.tokenizer, device) if a.model == 'random-1b'
                     else __import__('rsi_repro.generate', fromlist=['load_model']).load_model(ref, device))
    backend.stops = stop_ids(backend.tokenizer)
    tok, model = backend.tokenizer, backend.model
    rendered = [render(r['messages'], tok, serving.max_input_tokens, serving.system_prompt) for r in reqs]
    plain(model, tok, rendered[:2], 4, 2, backend.stops)           # warm-up
    n_b1 = len(rendered) if a.model == 'tiny' else 16          # one prompt at a time is too slow to run them all on a big model
    methods = {'plain-b1': lambda: plain(model, tok, rendered[:n_b1], a.max_new_tokens, 1, backend.stops),
               'plain-batch': lambda: plain(model, tok, rendered, a.max_new_tokens, a.batch, backend.stops),
               'rsi_repro': lambda: int(generate(reqs, ref, serving, tempfile.mkdtemp(), progress=False, backend_obj=backend).new_tokens.sum())}
    times = {m: [] for m in methods}
    tokens = {}
    for _ in range(a.repeats):                                  # interleaved, so warm-up and clocks favour no method
        for name, fn in methods.items():
            if device == 'cuda': torch.cuda.synchronize()
            t0 = time.perf_counter(); tokens[name] = fn()
            if device == 'cuda': torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t0)
    rows = []
    for name in methods:
        dt = min(times[name])                                   # best of the repeats: the first run of a shape pays for warm-up
        rows.append({'method': name, 'rows': n_b1 if name == 'plain-b1' else len(rendered), 'output_tokens': tokens[name],
                     'seconds': round(dt, 2), 'output_tokens_per_s': round(tokens[name] / dt, 1), 'all_seconds': [round(t, 2) for t in times[name]]})
    meta = {'model': a.model, 'parameters': sum(p.numel() for p in model.parameters()), 'device': torch.cuda.get_device_name() if device == 'cuda' else platform.processor() or 'cpu',
            'batch': a.batch, 'max_new_tokens': a.max_new_tokens, 'torch': torch.__version__,
            'transformers': __import__('transformers').__version__, 'python': platform.python_version()}
    print(json.dumps(meta))
    print(f"{'method':<12} {'rows':>5} {'out tokens':>10} {'seconds':>8} {'tokens/s':>9}")
    for r in rows: print(f"{r['method']:<12} {r['rows']:>5} {r['output_tokens']:>10} {r['seconds']:>8} {r['output_tokens_per_s']:>9}")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({'meta': meta, 'rows': rows}, indent=1))


if __name__ == '__main__':
    main()
