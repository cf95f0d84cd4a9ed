"""Where a vLLM engine's start goes: the GPU smoke study's first engine (data/nemotron_h_small, configs/gpu-smoke.yaml's
serving), started as the library starts it (`rsi_repro.backends.VLLMBackend`), sampled while it starts.

Every Python process of the start (this one, vLLM's engine core, any compile workers) copies all its threads' stacks
every `--every` seconds (a thread started by a sitecustomize put first on PYTHONPATH), and each line vLLM logs is stamped
with the seconds since the start. The summary counts, per function of vLLM, Triton, FlashInfer and torch, the samples
in which it was on a busy thread's stack (inclusive) and on top of it (self): so a silent stretch of the log is named.
Starts run one after another, each in a process of its own: `cold` with the compile caches moved aside (Triton's,
FlashInfer's, vLLM's and inductor's: the first engine of a run on a new machine), then `warm` (the caches the first left
on disk, in a new process: a later run), then `plain` (warm, not sampled: what the sampling costs). Any other label
starts with the caches as they are: `carried` names the first start on a new machine that was given the caches another
machine's first start left (gpu_study.sh `caches`, carried in as .triton_cache.tgz and .flashinfer_cache.tgz).

    python3 benchmarks/device/engine_start.py --out $OUT/engine_start.json [--starts cold warm] [--every 1]
"""
from __future__ import annotations
import argparse, collections, json, os, re, shutil, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# A thread in every process that copies each thread's Python stack every RSI_STACK_EVERY seconds (sys._current_frames,
# under the GIL; a first version with faulthandler's timed dumps, which read other threads' frames without it, saw both
# starts end in SIGSEGV within seconds, so `plain` starts once unsampled as a control)
SITECUSTOMIZE = '''import os
_d = os.environ.get('RSI_STACK_SAMPLES')
if _d:
    import sys, threading, time
    os.makedirs(_d, exist_ok=True)
    _f = open(os.path.join(_d, 'stacks-%d.txt' % os.getpid()), 'a')
    _f.write('argv %r\\n' % (sys.argv,)); _f.flush()
    def _sample(every=float(os.environ.get('RSI_STACK_EVERY', '1')), me=threading.get_ident):
        while True:
            time.sleep(every)
            out = ['Sample %.3f' % time.monotonic()]
            for tid, fr in sys._current_frames().items():
                if tid == me(): continue
                out.append('Thread 0x%x (most recent call first):' % tid)
                while fr is not None:
                    out.append('  File "%s", line %d in %s' % (fr.f_code.co_filename, fr.f_lineno or 0, fr.f_code.co_name)); fr = fr.f_back
            _f.write('\\n'.join(out) + '\\n'); _f.flush()
    threading.Thread(target=_sample, daemon=True, name='rsi-stack-sampler').start()
'''
CACHES = ('~/.triton/cache', '~/.cache/flashinfer', '~/.cache/vllm', f'/tmp/torchinductor_{os.environ.get("USER", "root")}')
PACKAGES = ('vllm', 'triton', 'flashinfer', 'torch', 'transformers', 'safetensors', 'rsi_repro')
IDLE = ('threading.py', 'selectors.py', 'queue.py', 'connection.py', 'synchronize.py', 'popen_', 'socket.py', 'zmq')
FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line \d+ in (?P<func>\S+)')


def start_once(profile: str) -> dict:
    "Start the profile's serving engine on its base, as a stage does; seconds to start and to answer one prompt."
    sys.path.insert(0, str(ROOT))
    from rsi_repro.backends import VLLMBackend, Decode
    from rsi_repro.config import load_profile
    from rsi_repro.eval_plan import model_ref
    prof = load_profile(ROOT / profile)
    ref = model_ref(prof)
    t = time.perf_counter()
    eng = VLLMBackend(ref, prof.serving, tempfile.mkdtemp())
    started = time.perf_counter() - t
    t = time.perf_counter()
    eng.generate([eng.tokenizer.encode('Hello')], Decode(max_new_tokens=8), seed=0)
    answered = time.perf_counter() - t
    eng.close()
    return {'start_seconds': round(started, 2), 'first_answer_seconds': round(answered, 2)}


def package_path(path: str) -> str:
    "A file's path from its package's folder on (vllm/..., triton/...), wherever it was installed (site-packages or a --target folder)."
    hits = [(path.rfind(f'/{pkg}/'), pkg) for pkg in PACKAGES if f'/{pkg}/' in path]
    return path[max(hits)[0] + 1:] if hits else path


def frames(block: list[str]) -> list[list[tuple[str, str]]]:
    "The threads of one dump, each its frames innermost first, as (module path from a known package, function)."
    threads, cur = [], None
    for line in block:
        if line.startswith('Thread 0x'): cur = []; threads.append(cur)
        elif cur is not None and (m := FRAME.match(line)):
            cur.append((package_path(m['file']), m['func']))
    return threads


def busy(thread: list[tuple[str, str]]) -> bool:
    "A thread doing work: its innermost frame is not a wait, a lock, a queue or a socket."
    return bool(thread) and not any(k in thread[0][0] for k in IDLE)


def summarise(folder: Path, every: float, top: int = 25) -> dict:
    "Per function: the seconds (samples x interval) it was on a busy thread's stack and on top of it, every process."
    incl, self_, procs = collections.Counter(), collections.Counter(), {}
    for f in sorted(folder.glob('stacks-*.txt')):
        text = f.read_text(errors='replace').splitlines()
        argv = text[0][5:] if text and text[0].startswith('argv ') else '?'
        blocks, cur, last = [], None, None
        for line in text[1:]:
            if line.startswith('Sample '):
                t = float(line.split()[1]); cur = []; blocks.append((t - last if last is not None else every, cur)); last = t
            elif cur is not None: cur.append(line)
        procs[f.stem] = {'argv': argv[:200], 'samples': len(blocks), 'seconds': round(sum(w for w, _ in blocks), 1)}
        for weight, block in blocks:
            seen = set()
            for th in filter(busy, frames(block)):
                named = [fr for fr in th if fr[0].split('/')[0] in PACKAGES]
                if named: self_[f"{named[0][0]}:{named[0][1]}"] += weight
                for fr in named:
                    key = f"{fr[0]}:{fr[1]}"
                    if key not in seen: seen.add(key); incl[key] += weight
    sec = lambda c: [{'function': k, 'seconds': round(n, 1)} for k, n in c.most_common(top)]
    return {'processes': procs, 'inclusive': sec(incl), 'self': sec(self_)}


INIT = re.compile(r'init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s')

def init_engine_seconds(log: list[str]) -> float | None:
    "What vLLM's own 'init engine' line reads (profiling, KV cache, warm-up), when the start got that far."
    return next((float(m[1]) for line in log if (m := INIT.search(line))), None)


def run_start(label: str, profile: str, every: float, work: Path) -> dict:
    "One start in a process of its own, sampled; its log lines stamped with seconds since the start."
    if label == 'cold':
        for d in CACHES:
            d = Path(d).expanduser()
            if d.exists(): shutil.rmtree(f'{d}.before_cold', ignore_errors=True); d.rename(f'{d}.before_cold')
    samples = work / f'stacks_{label}'; custom = work / 'sitecustomize'
    custom.mkdir(parents=True, exist_ok=True); (custom / 'sitecustomize.py').write_text(SITECUSTOMIZE)
    env = dict(os.environ, RSI_STACK_SAMPLES='' if label == 'plain' else str(samples), RSI_STACK_EVERY=str(every),
               VLLM_WORKER_MULTIPROC_METHOD='spawn',
               PYTHONPATH=f"{custom}:{os.environ.get('PYTHONPATH', '')}", PYTHONUNBUFFERED='1')
    t0, log = time.perf_counter(), []
    p = subprocess.Popen([sys.executable, __file__, '--one', '--profile', profile], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    for line in p.stdout:
        stamped = f"{time.perf_counter() - t0:7.1f} {line.rstrip()}"
        log.append(stamped); print(f"[{label}] {stamped}", flush=True)
    p.wait()
    result = next((json.loads(l.split('RESULT ', 1)[1]) for l in reversed(log) if 'RESULT ' in l), {'error': p.returncode})
    gaps = sorted(((float(b.split()[0]) - float(a.split()[0]), a[:240]) for a, b in zip(log, log[1:])), reverse=True)[:5]
    beats = [l for l in log if 'rsi-repro: starting vLLM' in l]      # backends.said_every's lines, every 10 s of a start
    return {'label': label, **result, 'init_engine_seconds': init_engine_seconds(log), 'wall_seconds': round(time.perf_counter() - t0, 1),
            'heartbeats': len(beats), 'heartbeat_lines': beats, 'longest_silences': [{'seconds': round(s, 1), 'after': line} for s, line in gaps],
            'profile': summarise(samples, every), 'log': log}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--profile', default='configs/gpu-smoke.yaml')
    ap.add_argument('--starts', nargs='+', default=['cold', 'warm', 'plain'])
    ap.add_argument('--every', type=float, default=1.0, help='seconds between stack samples')
    ap.add_argument('--out', default='engine_start.json')
    ap.add_argument('--one', action='store_true', help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one: print('RESULT ' + json.dumps(start_once(a.profile)), flush=True); return 0
    work, rows = Path(tempfile.mkdtemp(prefix='engine_start_')), []
    for label in a.starts:
        rows.append(run_start(label, a.profile, a.every, work))
        if (work / f'stacks_{label}').is_dir():          # the raw samples, for a question the summary does not answer
            shutil.make_archive(str(Path(a.out).with_name(f'engine_start_stacks_{label}')), 'gztar', work / f'stacks_{label}')
        r = rows[-1]
        print(f"== {label}: start {r.get('start_seconds')} s, first answer {r.get('first_answer_seconds')} s")
        print(f"   {r['heartbeats']} heartbeats; the last: {(r['heartbeat_lines'] or ['none'])[-1][:200]}")
        for s in r['longest_silences'][:3]: print(f"   silent {s['seconds']:6.1f} s after: {s['after'][:150]}")
        for f in r['profile']['inclusive'][:15]: print(f"   {f['seconds']:6.1f} s  {f['function']}")
        Path(a.out).write_text(json.dumps({'what': __doc__.split('\n\n')[1].replace('\n', ' '), 'profile': a.profile,
                                           'every_seconds': a.every, 'date': time.strftime('%Y-%m-%d'), 'starts': rows}, indent=1) + '\n')
    print(a.out)
    return 0


if __name__ == '__main__':
    sys.exit(main())
