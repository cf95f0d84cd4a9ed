"""Tile sizes for vLLM's fused-MoE Triton kernel on the Nemotron-H 30B-A3B layout's experts, found by timing them.

vLLM picks the kernel's config (BLOCK_SIZE_M/N/K, GROUP_SIZE_M, num_warps, num_stages) from a JSON file named by the
experts, the expert width and the GPU (`E=128,N=1856,device_name=...json`), keyed by the number of tokens M the MoE
layer sees (the nearest key wins), else from `get_default_config`. This script times vLLM's own op
(`fused_experts`, as the engine's Triton experts run it: squared ReLU without a gate, w1 (E, N, K), w2 (E, K, N), bf16,
random weights) for each M of `--ms` over a grid of candidate configs, vLLM's default config for that M and the entry
of the file vLLM ships for this shape on the H100 among them, each chosen through vLLM's `override_config`.

Two routings of the tokens to the experts are timed (`--routings`):
  uniform  each token to 6 distinct experts drawn at random (a trained router's spread: at M = 256 about 12 tokens an
           expert, every expert's weights read)
  engine   every token to the same 6 experts: what a `load_format='dummy'` engine (benchmarks/generation.py) routes to,
           as far as can be told without running it. vLLM's dummy weights are uniform in +-1e-3 and seeded by each
           parameter's size alone, so every MoE layer has the same e_score_correction_bias (spread 2e-3 over 128
           experts) while the router's logits on such weights are about 1e-5: the bias picks the experts, the same ones
           for every token. (A check: at batch 64 that engine decodes 8,199 tok/s on an H100, 7.8 ms a step, less than
           reading every expert's weights of 23 layers once would take, about 56 GB at 3.35 TB/s.)

Each candidate is timed as the engine's decode runs it, in a CUDA graph: `--inner` calls captured once, the graph
replayed `--warmup` times, then `--reps` times each timed with CUDA events; the time is the median replay over
`--inner`. Triton compiles every candidate first in `--workers` processes side by side (its on-disk cache, which the
timing process then reads), since compiling them one after another would take far longer than timing them.

Writes, under --out-dir: moe_tune.json (every candidate's time, or its error, per routing and M; the default's and the
shipped entry's), and for each routing a folder holding a vLLM config file (`moe_tuned/` for uniform,
`moe_tuned_engine/` for engine) named as vLLM names it on this GPU (vLLM's get_config_file_name): the best config for
each tuned M, vLLM's default config for every other key (1 .. 32768), so that an engine pointed at the folder
(VLLM_TUNED_CONFIG_FOLDER) differs from the default only at the tuned sizes (prefill chunks keep the default).

    PYTHONPATH=/tmp/site python3 benchmarks/device/moe_tune.py --out-dir $OUT [--ms 64 256] [--routings uniform engine]
"""
from __future__ import annotations
import argparse, itertools, json, os, random, statistics, sys, time
from pathlib import Path

E, TOPK, HIDDEN, INTER = 128, 6, 2688, 1856          # benchmarks/shapes.py NEMOTRON_H_30B_A3B: K = 2688, N = 1856
FILE_KEYS = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 8192, 16384, 32768]
SMEM_BYTES = 227 * 1024                                # Hopper's shared memory a block may take
CONFIG_KEYS = ('BLOCK_SIZE_M', 'BLOCK_SIZE_N', 'BLOCK_SIZE_K', 'GROUP_SIZE_M', 'num_warps', 'num_stages')


def grid(routing: str) -> list[dict]:
    "The candidate grid of one routing (shared memory that fits filtered in; sampled down to --cap later)."
    if routing == 'uniform':    # a few tokens an expert: short M tiles, the weights streamed
        space = dict(BLOCK_SIZE_M=[16, 32], BLOCK_SIZE_N=[32, 64, 128, 256], BLOCK_SIZE_K=[64, 128, 256], GROUP_SIZE_M=[1],
                     num_warps=[4, 8], num_stages=[3, 4, 5])
    else:                       # M tokens on each of 6 experts: GEMM-like tiles
        space = dict(BLOCK_SIZE_M=[32, 64, 128], BLOCK_SIZE_N=[64, 128, 256], BLOCK_SIZE_K=[64, 128], GROUP_SIZE_M=[1, 16],
                     num_warps=[4, 8], num_stages=[3, 4, 5])
    out = []
    for vals in itertools.product(*space.values()):
        c = dict(zip(space, vals))
        if (c['BLOCK_SIZE_M'] + c['BLOCK_SIZE_N']) * c['BLOCK_SIZE_K'] * 2 * c['num_stages'] > SMEM_BYTES: continue
        if c['BLOCK_SIZE_M'] * c['BLOCK_SIZE_N'] >= 128 * 256 and c['num_warps'] == 4: continue   # spills
        out.append(c)
    return out


def clean(c: dict) -> dict:
    return {k: int(c[k]) for k in CONFIG_KEYS if k in c}


def key(c: dict) -> str:
    return json.dumps(clean(c), sort_keys=True)


def shipped_entries() -> dict[int, dict]:
    "The config vLLM 0.26 ships for this shape on the H100 (bf16), by M (a candidate on any GPU)."
    import vllm.model_executor.layers.fused_moe.fused_moe as fm
    p = Path(fm.__file__).parent / 'configs' / f'E={E},N={INTER},device_name=NVIDIA_H100_80GB_HBM3.json'
    for q in (p, Path(str(p) + '.hidden')):      # gpu_study.sh may have hidden it for a default run
        if q.exists():
            d = json.loads(q.read_text()); d.pop('triton_version', None)
            return {int(k): clean(v) for k, v in d.items()}
    return {}


def default_config(m: int) -> dict:
    from vllm.model_executor.layers.fused_moe.fused_moe import get_default_config
    return get_default_config(m, E, INTER, HIDDEN, TOPK, None, None)    # as try_get_optimal_moe_config calls it for bf16


def make_inputs(routing: str, m: int, seed: int = 0):
    import torch
    g = torch.Generator(device='cuda').manual_seed(seed * 1000 + m + (7 if routing == 'engine' else 0))
    x = torch.randn(m, HIDDEN, device='cuda', dtype=torch.bfloat16, generator=g)
    if routing == 'uniform':
        ids = torch.rand(m, E, device='cuda', generator=g).topk(TOPK, dim=1).indices
    else:
        experts = torch.randperm(E, device='cuda', generator=g)[:TOPK]
        ids = experts.unsqueeze(0).expand(m, TOPK)
    w = torch.rand(m, TOPK, device='cuda', dtype=torch.float32, generator=g)
    return x, (w / w.sum(1, keepdim=True)).contiguous(), ids.to(torch.int32).contiguous()


def make_weights(seed: int = 0):
    import torch
    g = torch.Generator(device='cuda').manual_seed(seed)
    w1 = (torch.randn(E, INTER, HIDDEN, device='cuda', dtype=torch.bfloat16, generator=g) * HIDDEN ** -0.5)
    w2 = (torch.randn(E, HIDDEN, INTER, device='cuda', dtype=torch.bfloat16, generator=g) * INTER ** -0.5)
    return w1, w2


def call(w1, w2, inp):
    from vllm.model_executor.layers.fused_moe import MoEActivation, fused_experts
    x, tw, ids = inp
    return fused_experts(x, w1, w2, tw, ids, activation=MoEActivation.RELU2_NO_MUL, global_num_experts=E)


# ---- the compile workers (spawned processes: one GPU, Triton's cache on disk shared) ----
_W = {}


def _worker_init(combos):
    os.environ.setdefault('VLLM_LOGGING_LEVEL', 'ERROR')
    import torch
    torch.cuda.set_device(0)
    _W['w'] = make_weights()
    _W['inputs'] = {(r, m): make_inputs(r, m) for r, m in combos}


def _worker_compile(cfg: dict, combos: list) -> tuple[str, str | None, float]:
    import torch
    from vllm.model_executor.layers.fused_moe import override_config
    t = time.time()
    try:
        for rm in combos:
            with override_config(dict(cfg)):
                call(*_W['w'], _W['inputs'][tuple(rm)])
        torch.cuda.synchronize()
        return key(cfg), None, time.time() - t
    except Exception as e:     # OutOfResources (shared memory, registers), a compile error
        return key(cfg), f'{type(e).__name__}: {str(e)[:200]}', time.time() - t


def time_candidate(w1, w2, inp, cfg, inner: int, warmup: int, reps: int) -> float:
    "Microseconds of one call, the median of `reps` replays of a CUDA graph of `inner` calls."
    import torch
    from vllm.model_executor.layers.fused_moe import override_config
    with override_config(dict(cfg)):
        call(w1, w2, inp)                                   # compiled (or read from the cache) outside the capture
        torch.cuda.synchronize()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):                          # the allocator's warm-up on a side stream, as capture wants
            call(w1, w2, inp)
        torch.cuda.current_stream().wait_stream(s); torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(inner): call(w1, w2, inp)
    for _ in range(warmup): graph.replay()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in ev:
        a.record(); graph.replay(); b.record()
    torch.cuda.synchronize()
    ms = statistics.median(a.elapsed_time(b) for a, b in ev)
    del graph
    return ms * 1000 / inner


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out-dir', required=True)
    ap.add_argument('--ms', type=int, nargs='+', default=[64, 256])
    ap.add_argument('--routings', nargs='+', default=['uniform', 'engine'], choices=['uniform', 'engine'])
    ap.add_argument('--cap', type=int, default=50, help='candidates sampled from each routing\'s grid (default, shipped added)')
    ap.add_argument('--workers', type=int, default=min(12, max(1, (os.cpu_count() or 2) - 2)))
    ap.add_argument('--compile-budget-s', type=float, default=80, help='compiles not done by then are dropped')
    ap.add_argument('--time-budget-s', type=float, default=48, help='timing of each routing and M stops (leaving candidates untimed) after its share of this')
    ap.add_argument('--inner', type=int, default=5); ap.add_argument('--warmup', type=int, default=3)
    ap.add_argument('--reps', type=int, default=20)
    ap.add_argument('--seed', type=int, default=0)
    a = ap.parse_args()
    t0 = time.time()
    out = Path(a.out_dir); out.mkdir(parents=True, exist_ok=True)

    import torch, triton, vllm
    from vllm.model_executor.layers.fused_moe.fused_moe import get_config_file_name
    gpu = torch.cuda.get_device_name()
    shipped = shipped_entries()
    combos = [(r, m) for r in a.routings for m in a.ms]
    # the candidates of each routing: vLLM's default for each M, the shipped entry nearest each M, then the sampled grid
    anchors = {}
    for m in a.ms:
        anchors[key(default_config(m))] = clean(default_config(m))
        if shipped:
            s = shipped[min(shipped, key=lambda k: abs(k - m))]; anchors[key(s)] = s
    cands: dict[str, list[dict]] = {}
    rng = random.Random(a.seed)
    for r in a.routings:
        g = [c for c in grid(r) if key(c) not in anchors]
        rng.shuffle(g)
        cands[r] = list(anchors.values()) + g[:a.cap]
    by_key: dict[str, dict] = {}; where: dict[str, list] = {}
    for r in a.routings:
        for c in cands[r]:
            by_key[key(c)] = c
            where.setdefault(key(c), []).extend([[r, m] for m in a.ms])
    print(f'{gpu}: vLLM {vllm.__version__}, Triton {triton.__version__}; {len(by_key)} distinct configs over '
          f'{", ".join(f"{r} {len(cands[r])}" for r in a.routings)}; M {a.ms}; {a.workers} compile workers', flush=True)

    # 1. compile every candidate in worker processes (Triton's cache on disk)
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, wait, FIRST_COMPLETED
    compile_err: dict[str, str] = {}; compile_s: dict[str, float] = {}
    pending_keys = set(by_key)
    t1 = time.time()
    # the anchors first: they are compared in every case
    order = list(anchors) + [k for k in by_key if k not in anchors]
    ex = ProcessPoolExecutor(max_workers=a.workers, mp_context=mp.get_context('spawn'), initializer=_worker_init, initargs=(combos,))
    futs = {ex.submit(_worker_compile, by_key[k], where[k]): k for k in order}
    left = set(futs)
    while left and time.time() - t1 < a.compile_budget_s:
        done, left = wait(left, timeout=5, return_when=FIRST_COMPLETED)
        for f in done:
            try:
                k, err, s = f.result()
            except Exception as e:      # a worker died
                k, err, s = futs[f], f'worker: {type(e).__name__}: {str(e)[:200]}', 0.0
            pending_keys.discard(k); compile_s[k] = round(s, 2)
            if err: compile_err[k] = err
    for f in left: f.cancel()
    ex.shutdown(wait=True, cancel_futures=True)
    print(f'compiled {len(by_key) - len(pending_keys) - len(compile_err)} configs in {time.time() - t1:.0f} s; '
          f'{len(compile_err)} failed; {len(pending_keys)} not compiled in the budget', flush=True)

    # 2. time them one after another in this process, on one set of weights
    w1, w2 = make_weights(a.seed)
    results = {'meta': {'gpu': gpu, 'vllm': vllm.__version__, 'triton': triton.__version__, 'torch': torch.__version__,
                        'shape': dict(E=E, topk=TOPK, K_hidden=HIDDEN, N_moe_intermediate=INTER, activation='relu2_no_mul',
                                      dtype='bfloat16', w1=[E, INTER, HIDDEN], w2=[E, HIDDEN, INTER]),
                        'timing': dict(method='CUDA graph of `inner` calls, median of `reps` timed replays / inner',
                                       inner=a.inner, warmup=a.warmup, reps=a.reps),
                        'config_file_name': get_config_file_name(E, INTER, None), 'argv': sys.argv,
                        'compile_seconds': round(time.time() - t1, 1)},
               'routings': {}}
    t2 = time.time()
    for r in a.routings:
        results['routings'][r] = {}
        for m in a.ms:
            inp = make_inputs(r, m, a.seed)
            dkey = key(default_config(m)); skey = key(shipped[min(shipped, key=lambda k: abs(k - m))]) if shipped else None
            rows = []; tc = time.time()
            for c in cands[r]:
                k = key(c); row = {'config': c, 'compile_s': compile_s.get(k)}
                if k == dkey: row['is_default'] = True
                if k == skey: row['is_shipped_h100'] = True
                if k in compile_err: row['error'] = compile_err[k]
                elif k in pending_keys and k not in anchors: row['error'] = 'not compiled within the budget'
                elif time.time() - tc > a.time_budget_s / len(combos) and k not in anchors: row['error'] = 'not timed within the budget'
                else:
                    try:
                        row['us'] = round(time_candidate(w1, w2, inp, c, a.inner, a.warmup, a.reps), 2)
                    except Exception as e:
                        row['error'] = f'{type(e).__name__}: {str(e)[:200]}'
                rows.append(row)
            ok = [x for x in rows if 'us' in x]
            best = min(ok, key=lambda x: x['us']) if ok else None
            d = next((x for x in rows if x.get('is_default')), None)
            s = next((x for x in rows if x.get('is_shipped_h100')), None)
            results['routings'][r][str(m)] = {
                'default': {'config': clean(default_config(m)), 'us': d.get('us') if d else None},
                'shipped_h100': {'config': s['config'], 'us': s.get('us')} if s else None,
                'best': best and {'config': best['config'], 'us': best['us']},
                'speedup_vs_default': round(d['us'] / best['us'], 3) if best and d and d.get('us') else None,
                'timed': len(ok), 'failed': sum('error' in x for x in rows), 'candidates': rows}
            print(f'  {r:<8} M={m:<4} default {d.get("us") if d else None} us, best {best and best["us"]} us '
                  f'({len(ok)} timed, {time.time() - t0:.0f} s in)', flush=True)
    results['meta']['timing_seconds'] = round(time.time() - t2, 1)
    results['meta']['seconds'] = round(time.time() - t0, 1)

    # 3. the config files: the best for each tuned M, vLLM's default for every other key
    name = get_config_file_name(E, INTER, None)
    for r in a.routings:
        folder = out / ('moe_tuned' if r == 'uniform' else f'moe_tuned_{r}')
        folder.mkdir(parents=True, exist_ok=True)
        cfg = {str(k): clean(default_config(k)) for k in FILE_KEYS}
        for m in a.ms:
            b = results['routings'][r][str(m)]['best']
            if b: cfg[str(m)] = b['config']
        cfg = {str(k): cfg[str(k)] for k in sorted(map(int, cfg))}
        cfg['triton_version'] = triton.__version__
        (folder / name).write_text(json.dumps(cfg, indent=4) + '\n')
        results['meta'][f'config_file_{r}'] = str(folder / name)
    (out / 'moe_tune.json').write_text(json.dumps(results, indent=1) + '\n')

    print(f'\n{gpu}, MoE layer {E} experts top-{TOPK}, K {HIDDEN}, N {INTER}, bf16, relu2 (no gate): us per call '
          f'(x23 MoE layers = a decode step\'s MoE)')
    print(f'{"routing":<8} {"M":>5} {"default":>9} {"shipped":>9} {"best":>9} {"speed-up":>8}  best config')
    for r in a.routings:
        for m in a.ms:
            x = results['routings'][r][str(m)]
            b = x['best'] or {}
            cf = b.get('config') or {}
            cs = f"M{cf.get('BLOCK_SIZE_M')} N{cf.get('BLOCK_SIZE_N')} K{cf.get('BLOCK_SIZE_K')} G{cf.get('GROUP_SIZE_M')} " \
                 f"w{cf.get('num_warps')} s{cf.get('num_stages')}" if cf else '-'
            print(f'{r:<8} {m:>5} {x["default"]["us"]!s:>9} {(x["shipped_h100"] or {}).get("us")!s:>9} {b.get("us")!s:>9} '
                  f'{x["speedup_vs_default"]!s:>8}  {cs}')
    print(f'config files: {", ".join(str(results["meta"][f"config_file_{r}"]) for r in a.routings)}; '
          f'{time.time() - t0:.0f} s in all', flush=True)


if __name__ == '__main__':
    main()
