"""Output tokens/s of rsi_repro's generation backend against plain `model.generate`, on the same prompts, in one run.

    python benchmarks/generation.py                       # CPU, the tiny base
    python benchmarks/generation.py --model random-1b     # GPU, a ~1B-parameter random-initialised Llama

Three ways of decoding the same prompts greedily to the same token budget:
  plain-b1      model.generate one prompt at a time (what a first script does)
  plain-batch   model.generate on batches in the prompts' order, left padding, same stop tokens
  rsi_repro     rsi_repro.generate: same batch size, prompts sorted by length, shards written as it goes
Output tokens count the new tokens each row really produced (up to and including its stop token).
"""
import argparse, json, platform, sys, tempfile, time
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--model', default='tiny', choices=['tiny', 'random-1b'])
    ap.add_argument('--n', type=int, default=96)
    ap.add_argument('--max-new-tokens', type=int, default=64)
    ap.add_argument('--batch', type=int, default=16)
    ap.add_argument('--repeats', type=int, default=2, help='each method runs this many times, interleaved; the best time is reported')
    ap.add_argument('--out', default=str(ROOT / 'benchmarks/results/generation.json'))
    a = ap.parse_args()
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
