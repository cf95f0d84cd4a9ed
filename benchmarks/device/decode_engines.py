"""The evaluation's decode on the real model: what the number of engines, their KV caches and their batch limit do to
new tokens per second, side by side in one run.

The real-model profile's evaluation is the longest part of its run: SmolLM2-135M-Instruct decodes greedily to the
2,048-token limit on most H6 prompts (1,011 of 1,600 on 2026-12-05), so every read of a pool is ~2M new tokens over
contexts of up to ~2.2k. Whether that decode is bound by each engine's CPU loop (more engines help), by its KV cache
(sequences wait or are preempted once the cache is full: bigger caches help) or by the GPU's memory bandwidth (nothing
but fewer bytes helps) decides how the profile should spend the GPU's memory. Each variant below decodes the same
prompts with the same model through the study's own `rsi_repro.generate` (shards cut evenly over the engines, the
engines started once and then reused, as a run's stages reuse them), in a process of its own, one after another:

    ENGINESxKV_GIB:MAX_NUM_SEQS    e.g. 3x10:512 (the profile's own), 1x48:1024, 3x20:1024, 5x6:512

The first call of each variant decodes one prompt per engine (it starts the engines: its seconds are the start); the
timed call is the pool. Rows: new tokens, rows that ran to the limit, seconds, new tokens/s, and how many answers
differ from the first variant's (greedy decoding in batches of another shape may tie-break differently).

    python3 benchmarks/device/decode_engines.py --profile configs/smollm2.yaml --pool h6 --variants 3x10:512 1x48:1024 --out F

It needs the profile's converted base and pools (`rsi-repro run PROFILE --only pools`).
"""
import argparse, hashlib, json, math, os, shutil, subprocess, sys, time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def parse_variant(spec: str) -> dict:
    "'3x10:512' -> engines 3, kv_cache_gib 10, max_num_seqs 512."
    head, _, seqs = spec.partition(':')
    engines, _, kv = head.partition('x')
    return {'variant': spec, 'engines': int(engines), 'kv_cache_gib': float(kv), 'max_num_seqs': int(seqs or 512)}


def one_variant(profile_path: str, pool: str, variant: dict, work: Path, n: int | None = None, backend: str | None = None,
                max_new_tokens: int | None = None) -> dict:
    "Decode the pool (its first `n` rows) under one variant in this process; the engines close when it ends."
    from rsi_repro.config import load_profile
    from rsi_repro.eval_plan import model_ref
    from rsi_repro.generate import generate
    from rsi_repro.io import read_jsonl
    from rsi_repro.rejection import pool_requests
    profile = load_profile(profile_path)
    serving = profile.serving
    n_engines = variant['engines']
    requests = pool_requests(read_jsonl(Path(profile.run_dir) / 'pools' / f"{pool}.jsonl"))[:n]
    if max_new_tokens: serving = replace(serving, max_new_tokens=max_new_tokens)
    serving = replace(serving, shard_size=math.ceil(len(requests) / n_engines), shard_balance=True,
                      vllm=replace(serving.vllm, engines_per_gpu=n_engines, kv_cache_gib=variant['kv_cache_gib'],
                                   max_num_seqs=variant['max_num_seqs']))
    model = model_ref(profile)
    t0 = time.perf_counter()
    generate(requests[:n_engines], model, serving, work / 'warm', backend=backend, progress=False)   # starts every engine
    start = time.perf_counter() - t0
    t0 = time.perf_counter()
    rows = generate(requests, model, serving, work / 'pool', backend=backend, progress=False)
    seconds = time.perf_counter() - t0
    answers = {r.id: hashlib.sha256(r.response.encode()).hexdigest()[:16] for r in rows.itertuples()}
    return {**variant, 'start_seconds': round(start, 1), 'seconds': round(seconds, 1), 'rows': len(rows),
            'new_tokens': int(rows.new_tokens.sum()), 'at_limit': int((rows.finish_reason == 'length').sum()),
            'new_tokens_per_second': round(rows.new_tokens.sum() / seconds), 'answers': answers}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--profile', default='configs/smollm2.yaml')
    ap.add_argument('--pool', default='h6')
    ap.add_argument('--variants', nargs='+', default=['3x10:512'])
    ap.add_argument('--out', default='benchmarks/results/decode_engines.json')
    ap.add_argument('--work', default='/tmp/decode_engines')
    ap.add_argument('--n', type=int, help='the pool\'s first N prompts only (a check on the CPU)')
    ap.add_argument('--backend', help='hf: a check of this script on the CPU (the variants then differ in shards alone)')
    ap.add_argument('--max-new-tokens', type=int, help="instead of the profile's (a check on the CPU)")
    ap.add_argument('--one', help=argparse.SUPPRESS)          # a child: one variant, its JSON in <work>/<variant>.json
    a = ap.parse_args()
    if a.one:
        v = parse_variant(a.one)
        (Path(a.work) / f"{v['variant'].replace(':', '_')}.json").write_text(json.dumps(one_variant(a.profile, a.pool, v, Path(a.work) / v['variant'].replace(':', '_'), a.n, a.backend,
                                     a.max_new_tokens)))
        return
    from rsi_repro.bases import base_source, prepare_base
    from rsi_repro.config import load_profile
    profile = load_profile(a.profile)
    t0 = time.perf_counter()
    prepare_base(base_source(profile.base.name_or_path), profile.run_dir)    # the run's converted base, made once
    print(f"base ready in {time.perf_counter() - t0:.0f} s", flush=True)
    results = []
    shutil.rmtree(a.work, ignore_errors=True); Path(a.work).mkdir(parents=True)
    for spec in a.variants:       # each in its own process: an engine's GPU memory is freed only when its process ends
        t0 = time.perf_counter()
        extra = [*(['--n', str(a.n)] if a.n else []), *(['--backend', a.backend] if a.backend else []),
                 *(['--max-new-tokens', str(a.max_new_tokens)] if a.max_new_tokens else [])]
        p = subprocess.run([sys.executable, __file__, '--profile', a.profile, '--pool', a.pool, '--work', a.work, '--one', spec, *extra],
                           capture_output=True, text=True, cwd=ROOT)
        made = Path(a.work) / f"{spec.replace(':', '_')}.json"     # not stdout: vLLM's engines print there as they close
        if p.returncode != 0 or not made.exists():
            results.append({**parse_variant(spec), 'error': (p.stderr or p.stdout)[-1500:]})
            print(f"{spec}: failed after {time.perf_counter() - t0:.0f} s\n{results[-1]['error']}", flush=True)
        else:
            results.append(json.loads(made.read_text()))
            r = results[-1]
            print(f"{spec}: start {r['start_seconds']} s, {r['rows']} rows in {r['seconds']} s, {r['new_tokens']} new tokens "
                  f"({r['at_limit']} at the limit), {r['new_tokens_per_second']} tok/s", flush=True)
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(summary(a, results), indent=1))
    print(table(results))


def summary(a, results) -> dict:
    import torch
    first = next((r['answers'] for r in results if 'answers' in r), {})
    rows = [{**{k: v for k, v in r.items() if k != 'answers'},
             **({'answers_differing_from_first': sum(first.get(i) != h for i, h in r['answers'].items())} if 'answers' in r else {})}
            for r in results]
    return {'what': f"{a.pool} of {a.profile}, the base, greedy at the profile's serving settings, through rsi_repro.generate; "
                    "each variant in a process of its own, one after another",
            'device': torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu',
            'date': time.strftime('%Y-%m-%d'), 'variants': rows}


def table(results) -> str:
    lines = ['| variant | engines | KV GiB each | max seqs | start s | pool s | new tokens | at limit | tok/s |', '|' + '---|' * 9]
    for r in results:
        if 'error' in r: lines.append(f"| {r['variant']} | failed | | | | | | | |"); continue
        lines.append(f"| {r['variant']} | {r['engines']} | {r['kv_cache_gib']:g} | {r['max_num_seqs']} | {r['start_seconds']} | "
                     f"{r['seconds']} | {r['new_tokens']:,} | {r['at_limit']} | {r['new_tokens_per_second']:,} |")
    return '\n'.join(lines)


if __name__ == '__main__':
    main()
