"""The study's pipeline on GPUs (or a CPU), stage by stage: wall time, peak GPU memory, GPUs used, backend, versions.

    python benchmarks/gpu_pipeline.py run configs/gpu-smoke.yaml --out RESULT.json        # from a clean folder, then a rerun
    python benchmarks/gpu_pipeline.py resume configs/gpu-smoke.yaml --stage eval --kill-at-shards 2 --out RESULT.json
    python benchmarks/gpu_pipeline.py killrun configs/gpu-smoke.yaml --stage sft --out RESULT.json

`run` deletes the profile's run folder, runs every stage with `rsi_repro.pipeline.run` while a thread samples every
GPU's used memory through NVML (every 0.2 s), then runs the profile again (every stage must be skipped), and writes
per stage: wall seconds, the peak memory used on each GPU while it ran (all processes: the stage's kernel, its
training ranks and generation engines), the GPUs the stage saw, and the backend; with the versions and the machine.

`resume` reruns one finished stage from a clean folder (`--force`) in a child process, kills that process group
once it has written `--kill-at-shards` shards (mid-generation; `--kill-after` seconds at the latest), runs the profile again (the stage resumes from its shards), and
compares the resumed stage's per-prompt outcome files and generated rows with the finished run's: shards written
before the kill must be byte-identical afterwards (nothing lost, nothing generated twice), and every row must equal the
uninterrupted run's.

`killrun` is a preempted job: the whole profile from a clean folder, SIGKILLed (runner, stage kernel, training ranks,
engines) once a training checkpoint of `--stage` is complete, then the plain rerun, which must resume that stage's training
from its last checkpoint and finish every stage, then a rerun that skips all. It records the resume step and the steps
redone from each adapter's evidence, and with `--compare` trains the stage again uninterrupted (`--force`) and compares
the adapters tensor by tensor and the losses after the resume step. All three write the JSON to --out (merged into it
when it exists).
"""
import argparse, json, os, platform, shutil, signal, subprocess, sys, threading, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class GpuMemory:
    "Peak used memory per GPU between marks, sampled by NVML in a thread (every process on the GPU counts)."
    def __init__(self, every: float = 0.2):
        try:                                     # a machine without a GPU (a CPU profile timed the same way): no GPU to sample
            import pynvml
            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception: pynvml, handles = None, []
        self.nvml, self.every, self.handles = pynvml, every, handles
        self.peak = [0] * len(self.handles)
        self.stop = threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()
    def _loop(self):
        while not self.stop.is_set():
            for i, h in enumerate(self.handles): self.peak[i] = max(self.peak[i], self.nvml.nvmlDeviceGetMemoryInfo(h).used)
            time.sleep(self.every)
    def take(self) -> list[float]:
        "Peak GiB per GPU since the last take."
        out = [round(p / 2**30, 2) for p in self.peak]
        self.peak = [0] * len(self.handles)
        return out


def versions() -> dict:
    from rsi_repro.io import package_versions
    import torch
    out = {**package_versions(), 'torch': torch.__version__, 'cuda': torch.version.cuda, 'python': platform.python_version()}
    try:
        import vllm; out['vllm'] = vllm.__version__
    except ImportError: out['vllm'] = None
    out['gpus'] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return out


def timed_run(profile, mem, timings: Path | None = None, **kw):
    """Run the profile, noting each stage's peak GPU memory as its log line says it is done, and (given `timings`, the
    file the library's `timed` parts go to) which of the file's lines each stage wrote."""
    from rsi_repro.pipeline import run
    peaks, lines, t0 = {}, {}, time.time()
    count = lambda: len(timings.read_text().splitlines()) if timings is not None and timings.exists() else 0
    def log(line):
        print(line, flush=True)
        if not line.startswith('['): return
        stage = line[1:line.index(']')]
        if '] running' in line: lines[stage] = [count(), None]
        if '] done in' in line or '] unchanged' in line:
            peaks[stage] = mem.take()
            if stage in lines: lines[stage][1] = count()
    results = run(profile, log=log, **kw)
    return results, peaks, round(time.time() - t0, 1), lines


def stage_parts(timings: Path, lines: list | None) -> dict:
    "A stage's timed parts (merges, engine starts, decoding, split fits, training), summed by part: count and seconds."
    if not lines or lines[1] is None or not timings.exists(): return {}
    out = {}
    for row in map(json.loads, timings.read_text().splitlines()[lines[0]:lines[1]]):
        how = row.get('how')                 # an engine load: 'started' anew, or 'reloaded' with another checkpoint's weights
        name = row['part'] + (':' + '+'.join(sorted(set(map(str, how)))) if isinstance(how, list) else '')
        part = out.setdefault(name, {'count': 0, 'seconds': 0.0})
        part['count'] += 1; part['seconds'] = round(part['seconds'] + row['seconds'], 2)
    return out


def training_runs(run_dir: Path) -> list[dict]:
    "Where each training run's time went, from its evidence: the split fit's seconds beside the training's."
    out = []
    for f in sorted(run_dir.rglob('training_evidence.json')):
        ev = json.loads(f.read_text())
        if ev.get('wall_seconds') is None: continue          # a soup: mixed, not trained
        out.append({'run': str(f.parent.relative_to(run_dir)), 'steps': ev.get('steps'), 'wall_seconds': ev.get('wall_seconds'),
                    'fit_seconds': (ev.get('fit') or {}).get('seconds'), 'split': f"{ev.get('micro_batch')}x{ev.get('grad_accum')}",
                    'activation_checkpointing': ev.get('activation_checkpointing'), 'training_tokens': ev.get('training_tokens')})
    return out


def cell_seconds(stage_dir: Path, stage_seconds: float) -> dict:
    """Where a stage's time went inside its executed notebook: each code cell's seconds (papermill's record), its first
    line, and the stage's seconds outside every cell (the kernel's start, papermill's own work)."""
    nbs = sorted(stage_dir.glob('*.ipynb'))
    if len(nbs) != 1: return {'note': f"{len(nbs)} executed notebooks in {stage_dir.name}"}
    cells = [{'seconds': round(c['metadata']['papermill']['duration'], 2), 'first_line': ''.join(c['source']).strip().split('\n')[0][:100]}
             for c in json.loads(nbs[0].read_text())['cells']
             if c['cell_type'] == 'code' and (c.get('metadata', {}).get('papermill') or {}).get('duration') is not None]
    return {'cells': cells, 'outside_cells_seconds': round(stage_seconds - sum(c['seconds'] for c in cells), 1)}


def merge_out(path: Path, key: str, value) -> None:
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = value
    path.write_text(json.dumps(data, indent=1) + '\n')


def cmd_run(a):
    from rsi_repro.compute import processes
    from rsi_repro.config import load_profile
    profile = load_profile(a.profile)
    shutil.rmtree(profile.run_dir, ignore_errors=True)
    from rsi_repro.io import TIMINGS_ENV
    timings = profile.run_dir.parent / f".{profile.run_dir.name}.timings.jsonl"      # outside the run folder: not a run's file
    timings.unlink(missing_ok=True); os.environ[TIMINGS_ENV] = str(timings)
    mem = GpuMemory(); mem.take()
    first, peaks, total, lines = timed_run(a.profile, mem, timings)
    procs = processes(profile.compute)
    stages = [{'stage': r.stage, 'status': r.status, 'seconds': r.seconds, 'peak_gib_per_gpu': peaks.get(r.stage),
               'gpus': list(procs.gpus), 'backend': profile.serving.backend,
               'notebook': cell_seconds(profile.run_dir / r.stage, r.seconds), 'parts': stage_parts(timings, lines.get(r.stage))}
              for r in first]
    again, _, total_again, _ = timed_run(a.profile, mem)
    result = {'profile': a.profile, 'run_dir': str(profile.run_dir.relative_to(ROOT)), 'stages': stages,
              'stage_seconds': round(sum(r.seconds for r in first), 1), 'wall_seconds': total,
              'rerun': {'statuses': sorted({r.status for r in again}), 'wall_seconds': total_again},
              'training_runs': training_runs(profile.run_dir),
              'versions': versions(), 'date': time.strftime('%Y-%m-%d')}
    merge_out(Path(a.out), 'run', result)
    print(json.dumps({k: v for k, v in result.items() if k != 'stages'}, indent=1))
    for s in stages: print(f"{s['stage']:<12} {s['status']:<8} {s['seconds']:>8.1f} s  peak {s['peak_gib_per_gpu']} GiB")
    if set(result['rerun']['statuses']) != {'skipped'}: sys.exit(f"the rerun did not skip every stage: {result['rerun']['statuses']}")


def rows_of(stage_dir: Path) -> dict:
    from rsi_repro.io import read_jsonl
    return {str(p.relative_to(stage_dir)): read_jsonl(p) for p in sorted(stage_dir.rglob('*.jsonl'))
            if 'shard-' in p.name or p.name.endswith('outcomes.jsonl')}


def cmd_resume(a):
    from rsi_repro.config import load_profile
    from rsi_repro.io import sha256_file
    profile = load_profile(a.profile)
    stage_dir = profile.run_dir / a.stage
    before = rows_of(stage_dir)
    if not before: sys.exit(f"{stage_dir}: run the profile first (no rows to compare with)")
    child = subprocess.Popen([sys.executable, '-m', 'rsi_repro.cli', 'run', a.profile, '--only', a.stage, '--force', a.stage],
                             cwd=ROOT, start_new_session=True)
    started = time.time()
    while time.time() - started < a.kill_after and child.poll() is None:      # mid-generation: once shards are on disk
        if sum(p.stat().st_mtime > started for p in stage_dir.rglob('shard-*.jsonl')) >= a.kill_at_shards: break
        time.sleep(0.5)
    killed_after = round(time.time() - started, 1)
    if child.poll() is not None: sys.exit(f"the stage finished in {killed_after} s, before {a.kill_at_shards} shards: nothing to resume")
    os.killpg(child.pid, signal.SIGKILL); child.wait()
    for aside in profile.run_dir.glob(f'.{a.stage}.previous*'): shutil.rmtree(aside)   # else the finished run is put back
    time.sleep(2)
    shards = {str(p.relative_to(stage_dir)): (p.stat().st_mtime_ns, sha256_file(p)) for p in stage_dir.rglob('shard-*.jsonl')}
    t0 = time.time()
    done = subprocess.run([sys.executable, '-m', 'rsi_repro.cli', 'run', a.profile], cwd=ROOT)
    after = rows_of(stage_dir)
    kept = {k: v for k, v in shards.items() if (stage_dir / k).exists() and
            ((stage_dir / k).stat().st_mtime_ns, sha256_file(stage_dir / k)) == v}
    differ = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    result = {'stage': a.stage, 'killed_after_seconds': killed_after, 'shards_written_before_kill': len(shards),
              'shards_kept_unchanged': len(kept), 'resume_exit': done.returncode, 'resume_seconds': round(time.time() - t0, 1),
              'files_compared': len(set(before) | set(after)), 'files_differing': differ[:20], 'n_differing': len(differ)}
    merge_out(Path(a.out), f'resume_{a.stage}', result)
    print(json.dumps(result, indent=1))


def adapters_of(stage_dir: Path) -> dict:
    "Each adapter folder under a stage (relative name) and its tensors."
    from safetensors.torch import load_file
    return {str(p.parent.relative_to(stage_dir)): load_file(p) for p in sorted(stage_dir.rglob('adapter_model.safetensors'))}


def losses_of(adapter: Path) -> dict:
    return {r['step']: r['loss'] for r in json.loads((adapter / 'log_history.json').read_text()) if 'loss' in r}


def compare_adapters(a: dict, b: dict) -> dict:
    "Tensors equal bit for bit, and the largest absolute difference, adapter by adapter."
    out = {}
    for name in sorted(set(a) | set(b)):
        x, y = a.get(name, {}), b.get(name, {})
        same_keys = sorted(x) == sorted(y)
        diffs = [float((x[k].float() - y[k].float()).abs().max()) for k in x if k in y]
        out[name] = {'same_tensor_names': same_keys, 'tensors': len(x), 'bit_equal': sum(bool((x[k] == y[k]).all()) for k in x if k in y),
                     'max_abs_diff': max(diffs, default=None)}
    return out


def cmd_killrun(a):
    from rsi_repro.config import load_profile
    profile = load_profile(a.profile)
    run_dir, cmd = profile.run_dir, [sys.executable, '-m', 'rsi_repro.cli', 'run', a.profile]
    stage_dir = run_dir / a.stage
    shutil.rmtree(run_dir, ignore_errors=True)
    marks = lambda: sorted(stage_dir.rglob('checkpoint-*/.complete'))
    started = time.time()
    child = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)
    while time.time() - started < a.kill_after and child.poll() is None and len(marks()) < a.kill_at_checkpoints: time.sleep(0.05)
    if child.poll() is not None: sys.exit(f"the run ended ({child.returncode}) before {a.kill_at_checkpoints} checkpoint(s) of {a.stage}: nothing to resume")
    complete = [str(p.parent.relative_to(run_dir)) for p in marks()]
    os.killpg(child.pid, signal.SIGKILL); child.wait()
    killed_after = round(time.time() - started, 1)
    print(f"killed after {killed_after} s with complete checkpoints {complete}", flush=True)
    time.sleep(5)                                      # the killed engines' GPU memory returns to the driver
    t0 = time.time()
    rerun = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    Path(a.log).write_text(rerun.stdout + rerun.stderr)
    evidence = {str(p.parent.relative_to(stage_dir)): json.loads(p.read_text()).get('checkpoints')
                for p in sorted(stage_dir.rglob('training_evidence.json'))}
    result = {'stage': a.stage, 'killed_after_seconds': killed_after, 'complete_checkpoints_at_kill': complete,
              'rerun_exit': rerun.returncode, 'rerun_seconds': round(time.time() - t0, 1),
              'rerun_says': [l.strip() for l in (rerun.stdout + rerun.stderr).splitlines() if 'interrupted run' in l or ('resume' in l and 'checkpoint' in l.lower())][:10],
              'evidence_checkpoints': evidence,
              'checkpoints_left': [str(p.relative_to(run_dir)) for p in run_dir.rglob('checkpoint-*')]}
    mem = GpuMemory()
    again, _, _, _ = timed_run(a.profile, mem)
    result['again_statuses'] = sorted({r.status for r in again})
    if a.compare:
        resumed_dir = Path('/tmp') / f'{profile.run_dir.name}.{a.stage}.resumed'
        shutil.rmtree(resumed_dir, ignore_errors=True); shutil.copytree(stage_dir, resumed_dir)
        whole = subprocess.run(cmd + ['--only', a.stage, '--force', a.stage], cwd=ROOT, capture_output=True, text=True)
        result['uninterrupted_exit'] = whole.returncode
        if whole.returncode: sys.exit(f"the uninterrupted {a.stage} failed ({whole.returncode}): nothing to compare with\n{whole.stderr[-2000:]}")
        ra, wa = adapters_of(resumed_dir), adapters_of(stage_dir)
        result['adapters_resumed_vs_uninterrupted'] = compare_adapters(ra, wa)
        loss = {}
        for name in ra:
            if name not in wa: continue
            step = (evidence.get(str(Path(name))) or {}).get('resumed_from_step')
            lr, lw = losses_of(resumed_dir / name), losses_of(stage_dir / name)
            after = [s for s in lr if step is not None and s > step and s in lw]
            loss[name] = {'resumed_from_step': step, 'steps_compared': len(after),
                          'max_abs_loss_diff_after_resume': max((abs(lr[s] - lw[s]) for s in after), default=None)}
        result['losses_after_resume'] = loss
    merge_out(Path(a.out), f'killrun_{a.stage}', result)
    print(json.dumps(result, indent=1))
    if rerun.returncode or result['again_statuses'] != ['skipped']: sys.exit("the rerun failed or the run after it did not skip every stage")


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('what', choices=['run', 'resume', 'killrun']); ap.add_argument('profile')
    ap.add_argument('--out', required=True); ap.add_argument('--stage', default='eval'); ap.add_argument('--kill-after', type=float, default=300, help='at the latest')
    ap.add_argument('--kill-at-shards', type=int, default=2, help='kill once this many shards were written')
    ap.add_argument('--kill-at-checkpoints', type=int, default=1, help='killrun: kill once this many checkpoints of the stage are complete')
    ap.add_argument('--compare', action='store_true', help='killrun: then train the stage uninterrupted and compare the adapters')
    ap.add_argument('--log', default='/tmp/killrun_rerun.log', help="killrun: the rerun's output")
    a = ap.parse_args()
    {'run': cmd_run, 'resume': cmd_resume, 'killrun': cmd_killrun}[a.what](a)
