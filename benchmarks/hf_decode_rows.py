"""`model.generate` against the decode that lets stopped rows go, on the demo's own workloads (CPU).

`model.generate` computes every row of a batch until the batch's longest answer stops. `HFBackend` decodes with
`rsi_repro.backends.decode_dropping`, which takes a row out of the batch and out of its KV cache once it has stopped.
This measures both on the demo's finished run (`make demo` first): H6's and probe2's greedy reads of the base and of
v6141 (an unmerged LoRA adapter), and the repair's rejection sampling (r5's prompts, the profile's samples per prompt,
temperature, top_p and length, from the DPO adapter). Both sides: the same prompts, batch size and sort by length; one
after the other in one process. For the greedy reads it also counts the rows whose tokens equal generate's (its
batches shrink, and the CPU's matrix products may differ in their last bits with the batch's size); sampled rows
differ by construction (the random draws are the batch's), so only their time is compared.

    python benchmarks/hf_decode_rows.py [--out benchmarks/results/hf_decode_rows.json]
"""
from __future__ import annotations
import argparse, json, os, platform, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def batches(prompts, batch_size: int, pad: int):
    "Left-padded batches of prompts sorted by length, as HFBackend makes them."
    import torch
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    for s in range(0, len(order), batch_size):
        b = [list(prompts[i]) for i in order[s:s + batch_size]]
        w = max(map(len, b))
        yield ([order[j] for j in range(s, min(s + batch_size, len(order)))], w,
               torch.tensor([[pad] * (w - len(p)) + p for p in b]), torch.tensor([[0] * (w - len(p)) + [1] * len(p) for p in b]))


def measure(model, tok, prompts, max_new: int, batch_size: int, sample: dict | None, seed: int = 0) -> dict:
    import torch
    from rsi_repro.backends import cut_at_stop, decode_dropping, sampler, stop_ids
    stops, pad = stop_ids(tok), tok.pad_token_id
    kw = (dict(do_sample=True, temperature=sample['temperature'], top_p=sample['top_p'], top_k=0) if sample
          else dict(do_sample=False, temperature=None, top_p=None, top_k=None))
    pick = sampler(sample['temperature'], sample['top_p']) if sample else (lambda logits: logits.argmax(-1))
    got = {}
    for name in ('generate', 'rows_let_go'):
        rows, t = [None] * len(prompts), time.perf_counter()
        for b, (idx, w, ids, mask) in enumerate(batches(prompts, batch_size, pad)):
            torch.manual_seed(seed * 1_000_003 + b)
            with torch.no_grad():
                new = (model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, eos_token_id=stops, pad_token_id=pad,
                                      **kw)[:, w:].tolist() if name == 'generate'
                       else decode_dropping(model, ids, mask, max_new, stops, pick))
            for i, toks in zip(idx, new): rows[i] = cut_at_stop(toks, stops)
        got[name] = {'seconds': round(time.perf_counter() - t, 2), 'rows': rows}
    g, d = got['generate']['rows'], got['rows_let_go']['rows']
    return {'sequences': len(prompts), 'max_new_tokens': max_new, 'batch_size': batch_size, 'decode': 'sampled' if sample else 'greedy',
            'new_tokens_generate': sum(len(c.token_ids) for c in g), 'new_tokens_rows_let_go': sum(len(c.token_ids) for c in d),
            'seconds_generate': got['generate']['seconds'], 'seconds_rows_let_go': got['rows_let_go']['seconds'],
            'speedup': round(got['generate']['seconds'] / got['rows_let_go']['seconds'], 2),
            **({} if sample else {'rows_equal_to_generate': sum(a == b for a, b in zip(g, d))})}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--run', default='outputs/tiny', help="the demo's finished run folder")
    ap.add_argument('--out', default=str(ROOT / 'benchmarks/results/hf_decode_rows.json'))
    a = ap.parse_args(argv)
    import torch, transformers
    from rsi_repro.backends import ModelRef, load_model, load_tokenizer
    from rsi_repro.chat import render
    from rsi_repro.config import load_profile
    from rsi_repro.io import read_jsonl
    prof, run = load_profile(ROOT / 'configs/tiny.yaml'), ROOT / a.run
    base, s = str(prof.resolve(prof.base.name_or_path)), prof.serving
    def prompts(pool, tok):
        return [render([{'role': 'user', 'content': r['prompt']}], tok, s.max_input_tokens, s.system_prompt).input_ids
                for r in read_jsonl(run / 'pools' / f'{pool}.jsonl')]
    work = [('base', None, 'h6', None), ('base', None, 'probe2', None),
            ('v6141', run / 'rounds/v6141/adapter', 'h6', None), ('v6141', run / 'rounds/v6141/adapter', 'probe2', None),
            ('dpo', run / 'dpo/adapter', prof.repair.pool, prof.repair.sampling)]
    rows = []
    for ck, adapter, pool, sampling in work:
        ref = ModelRef(base, adapter=str(adapter) if adapter else None, dtype=prof.base.dtype)
        tok, model = load_tokenizer(ref), load_model(ref, 'cpu')
        ps = prompts(pool, tok)
        if sampling:
            ps = [p for p in ps for _ in range(sampling.k)]
            m = measure(model, tok, ps, sampling.max_new_tokens, s.batch_size, {'temperature': sampling.temperature, 'top_p': sampling.top_p},
                        sampling.seed)
        else: m = measure(model, tok, ps, s.max_new_tokens, s.batch_size, None)
        rows.append({'checkpoint': ck, 'pool': pool, **m})
        same = f", {m['rows_equal_to_generate']} of {m['sequences']} rows equal" if 'rows_equal_to_generate' in m else ''
        print(f"{ck:6} {pool:7} {m['decode']:8} {m['sequences']:5} seqs: generate {m['seconds_generate']:6.1f} s, rows let go "
              f"{m['seconds_rows_let_go']:6.1f} s ({m['speedup']:.2f}x){same}", flush=True)
    doc = {'what': __doc__.split('\n\n')[1].replace('\n', ' '), 'command': 'python benchmarks/hf_decode_rows.py',
           'date': time.strftime('%Y-%m-%d'), 'cpus': os.cpu_count(), 'torch_threads': torch.get_num_threads(),
           'python': platform.python_version(), 'torch': torch.__version__, 'transformers': transformers.__version__, 'workloads': rows}
    Path(a.out).write_text(json.dumps(doc, indent=1) + '\n'); print(a.out)
    return 0


if __name__ == '__main__':
    sys.exit(main())
