"""The SFT (and DPO) entry points under one process, DDP and FSDP2 at the same effective batch: losses, tokens/s, memory.

    python benchmarks/multi_gpu.py --profile configs/nemotron.yaml --section sft --base BASE --mix MIX.npz [--pairs PAIRS.jsonl] --gpus 2
    python benchmarks/multi_gpu.py --profile configs/tiny.yaml --section sft --mix MIX.npz [--pairs PAIRS.jsonl] --cpu   # 2 gloo processes

Each variant runs `rsi-repro train-sft` (and, with --pairs, `rsi_repro.train.train_dpo` with the profile's dpo section)
through `benchmarks/device/rank_entry.py`, which afterwards records each rank's peak GPU memory and per-step times. The
distributed variants start through `accelerate launch` with configs/accelerate/ddp.yaml and fsdp2.yaml (`torchrun` on
CPU), with micro-batch x grad-accum x processes equal to the single-process run's effective batch, so the losses are
comparable step by step. The adapter each variant's rank 0 saved is then loaded as the seed card's "How to use" snippet
does (tokenizer + the folder's chat_template.jinja, `AutoModelForCausalLM.from_pretrained(BASE, torch_dtype="auto")`,
`PeftModel.from_pretrained(model, ADAPTER)`), its LoRA weights compared with the saved file, and one forward pass run
with the adapter on and off. Prints a table; writes the JSON to --out after every variant.

The single-process run sees one GPU (CUDA_VISIBLE_DEVICES=0; TRL refuses nn.DataParallel over several). Throughput is
reported from the trainer's own per-step token counts: over the whole run, and over the full-size steps after the first
two (`full_step_tokens_per_s`, from rank 0's clock at every step). `--only STAGE:VARIANT` with `--merge EARLIER.json`
reruns some variants into an earlier run's results (a variant that ran there is kept, this run's beside it as NAME-repeat).
"""
import argparse, datetime, json, os, platform, signal, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENTRY = str(ROOT / 'benchmarks/device/rank_entry.py')
# NVLink multicast stays off on the lent GPU hosts (a program that uses it can take the host's GPUs out of service)
SAFE_ENV = {'NCCL_NVLS_ENABLE': '0', 'TORCH_SYMM_MEM_DISABLE_MULTICAST': '1', 'NVSHMEM_DISABLE_NVLS': '1'}


def run(cmd, timeout, env=None):
    t0 = time.time()
    p = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **(env or {}), **SAFE_ENV}, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL); out, _ = p.communicate()
        return {'ok': False, 'seconds': round(time.time() - t0, 1), 'error': f'timed out after {timeout} s\n' + (out or '')[-3000:]}
    if p.returncode != 0:
        return {'ok': False, 'seconds': round(time.time() - t0, 1), 'error': (out or '')[-3000:]}
    return {'ok': True, 'seconds': round(time.time() - t0, 1)}


def check_adapter(base, adapter):
    "Load the adapter as the seed card's snippet does; compare its LoRA weights with the file; one forward with it on and off."
    import torch
    from peft import PeftModel, get_peft_model_state_dict
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(base)
    tok.chat_template = open(Path(adapter) / 'chat_template.jinja').read()
    model = AutoModelForCausalLM.from_pretrained(base, torch_dtype='auto')
    model = PeftModel.from_pretrained(model, adapter)   # this adapter
    saved = load_file(str(Path(adapter) / 'adapter_model.safetensors'))
    loaded = get_peft_model_state_dict(model)
    same = set(saved) == set(loaded) and all(torch.equal(saved[k], loaded[k].to(saved[k].dtype).cpu()) for k in saved)
    b_norm = sum(float(v.float().norm()) for k, v in saved.items() if 'lora_B' in k)
    r = {'loads': True, 'weights_equal_file': same, 'lora_tensors': len(saved), 'lora_B_norm': round(b_norm, 4)}
    try:
        if torch.cuda.is_available(): model = model.to('cuda')
        ids = tok.apply_chat_template([{'role': 'user', 'content': 'Name three primary colours.'}], add_generation_prompt=True,
                                      return_tensors='pt', return_dict=True)['input_ids'].to(model.device)
        with torch.no_grad():
            on = model(input_ids=ids).logits.float()
            with model.disable_adapter(): off = model(input_ids=ids).logits.float()
        r.update(logits_finite=bool(torch.isfinite(on).all()), max_abs_logit_change_by_adapter=round(float((on - off).abs().max()), 4))
    except Exception as e:                                  # the load itself succeeded; record why the forward did not
        r['forward_error'] = f"{type(e).__name__}: {e}"[:500]
    del model
    if torch.cuda.is_available(): torch.cuda.empty_cache()
    return r


def summarise(out, r):
    ev = json.loads((out / 'training_evidence.json').read_text())
    log = [x for x in json.loads((out / 'log_history.json').read_text()) if 'loss' in x]
    r.update(world_size=ev['world_size'], micro_batch=ev['micro_batch'], grad_accum=ev['grad_accum'], effective_batch=ev['effective_batch'],
             steps=ev['steps'], training_tokens=ev['training_tokens'], supervised_tokens=ev['supervised_tokens'],
             train_seconds=ev['wall_seconds'], tokens_per_s=round(ev['training_tokens'] / ev['wall_seconds'], 1),
             losses=[round(x['loss'], 4) for x in log], grad_norms=[round(x['grad_norm'], 4) for x in log if 'grad_norm' in x])
    if 'rewards/margins' in log[0]: r['reward_margins'] = [round(x['rewards/margins'], 4) for x in log]
    peaks = sorted((json.loads(p.read_text()) for p in out.glob('peak_rank*.json')), key=lambda p: p['rank'])
    if peaks: r['peak_memory_gib'] = peaks
    step_stats(out, r)


def step_stats(out, r, skip=2):
    """Per-step tokens as the trainer logs them (TRL's cumulative `num_tokens`, summed over ranks) and per-step times (rank 0's
    clock at each step's end). `trainer_tokens_per_s` = the trainer's tokens over the training wall time (the evidence's
    `training_tokens` also counts micro-batches the data loader collated ahead and never trained on when a run stops inside an
    epoch); `full_step_tokens_per_s` = tokens over time of steps skip+1 .. the last full-size step (warm-up left out)."""
    log = [x for x in json.loads((out / 'log_history.json').read_text()) if 'loss' in x]
    if not all('num_tokens' in x for x in log): return
    cum = [int(x['num_tokens']) for x in log]
    r['step_tokens'] = [b - a for a, b in zip([0] + cum, cum)]
    r['trainer_tokens'] = cum[-1]
    r['trainer_tokens_per_s'] = round(cum[-1] / r['train_seconds'], 1)
    st = out / 'step_times_rank0.json'
    if not st.exists(): return
    t = json.loads(st.read_text())
    if len(t) != len(cum): return
    r['step_seconds'] = [round(b - a, 3) for a, b in zip(t, t[1:])]        # steps 2..n
    med = sorted(r['step_tokens'])[len(cum) // 2]
    last = len(cum) - 1 if r['step_tokens'][-1] < 0.75 * med else len(cum)  # a short last step (end of the data) is left out
    if last - skip >= 2:
        r['full_steps_timed'] = [skip + 1, last]
        r['full_step_tokens_per_s'] = round(sum(r['step_tokens'][skip:last]) / (t[last - 1] - t[skip - 1]), 1)


def compare(results, n):
    "Each stage's variants against its single-process run: loss differences step by step, speed-up, scaling efficiency."
    for stage, variants in results.items():
        if stage in ('meta', 'failed_attempts'): continue
        single = variants.get('single', {})
        for name, r in variants.items():
            if name == 'single' or not r.get('ok'): continue
            ref = single.get('losses')
            if r.get('losses') and ref:
                d = [abs(x - y) for x, y in zip(r['losses'], ref)]
                r['max_abs_loss_diff_vs_single'] = round(max(d), 4); r['mean_abs_loss_diff_vs_single'] = round(sum(d) / len(d), 4)
            if r.get('tokens_per_s') and single.get('tokens_per_s'):
                r['speedup_vs_single'] = round(r['tokens_per_s'] / single['tokens_per_s'], 3)
                r['scaling_efficiency'] = round(r['speedup_vs_single'] / r['world_size'], 3)
            first = variants.get(name.removesuffix('-repeat')) if name.endswith('-repeat') else None
            if first and first.get('losses') and r.get('losses'):   # two runs of one variant: the run-to-run spread
                d = [abs(x - y) for x, y in zip(r['losses'], first['losses'])]
                r['max_abs_loss_diff_vs_first_run'] = round(max(d), 4); r['mean_abs_loss_diff_vs_first_run'] = round(sum(d) / len(d), 4)
            for key in ('trainer_tokens_per_s', 'full_step_tokens_per_s'):
                if r.get(key) and single.get(key):
                    r[key.replace('tokens_per_s', 'speedup_vs_single')] = round(r[key] / single[key], 3)
                    r[key.replace('tokens_per_s', 'scaling_efficiency')] = round(r[key] / single[key] / r['world_size'], 3)


def merge(first, results):
    """This run's variants into an earlier run's results: a variant that failed there is replaced, one that ran there is kept
    and this run's goes in beside it as NAME-repeat."""
    out = json.loads(json.dumps(first)); out['meta'] = {'runs': (first['meta'].get('runs') or [first['meta']]) + [results['meta']]}
    for stage, variants in out.items():
        if stage not in ('meta', 'failed_attempts'):
            for r in variants.values(): r.setdefault('run', 1)
    for stage, variants in results.items():
        if stage == 'meta': continue
        out.setdefault(stage, {})
        for name, r in variants.items():
            old = out[stage].get(name)
            if old is not None and old.get('ok'): out[stage][f'{name}-repeat'] = r
            else:
                if old is not None: out.setdefault('failed_attempts', {}).setdefault(stage, {})[name] = old
                out[stage][name] = r
            r['run'] = len(out['meta']['runs'])
    for stage, variants in out.items():       # the single-process run first, as in a fresh run
        if stage not in ('meta', 'failed_attempts') and 'single' in variants:
            out[stage] = {'single': variants['single'], **{k: v for k, v in variants.items() if k != 'single'}}
    return out


def versions():
    v = {'python': platform.python_version()}
    for m in ('torch', 'transformers', 'peft', 'trl', 'accelerate', 'datasets', 'pyarrow'):
        try: v[m] = __import__(m).__version__
        except Exception as e: v[m] = f'unavailable ({type(e).__name__})'
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--profile', required=True); ap.add_argument('--section', default='sft')
    ap.add_argument('--base'); ap.add_argument('--mix', required=True)
    ap.add_argument('--steps', type=int, default=30); ap.add_argument('--micro-batch', type=int, default=4)
    ap.add_argument('--grad-accum', type=int, default=4, help='of the single-process run')
    ap.add_argument('--pairs', help='DPO pairs (JSONL): also compare DPO runs')
    ap.add_argument('--dpo-steps', type=int, default=10); ap.add_argument('--dpo-micro-batch', type=int, default=4)
    ap.add_argument('--dpo-grad-accum', type=int, default=4, help='of the single-process run')
    ap.add_argument('--dpo-lr', type=float, help="default: the profile's dpo lr"); ap.add_argument('--beta', type=float)
    ap.add_argument('--gpus', type=int, default=1); ap.add_argument('--cpu', action='store_true')
    ap.add_argument('--timeout', type=int, default=900, help='seconds per variant')
    ap.add_argument('--only', action='append', default=[], metavar='STAGE:VARIANT', help='run only these (repeatable), e.g. sft:single')
    ap.add_argument('--merge', help="an earlier run's JSON to merge this run's variants into (written to --out)")
    ap.add_argument('--work', default='/tmp/rsi_multi'); ap.add_argument('--out', default=str(ROOT / 'benchmarks/results/multi_gpu.json'))
    a = ap.parse_args()
    work = Path(a.work); work.mkdir(parents=True, exist_ok=True)
    n = 2 if a.cpu else a.gpus
    for ga in [a.grad_accum] + ([a.dpo_grad_accum] if a.pairs else []):
        if ga % n: sys.exit(f"grad-accum {ga} is not divisible by {n} processes")
    base_args = (['--base', a.base] if a.base else []) + ([] if a.cpu else ['--bf16'])
    stages = {'sft': (['sft', a.profile, '--section', a.section, '--mix', a.mix, '--steps', str(a.steps), '--micro-batch', str(a.micro_batch),
                       '--report-to', 'none'] + base_args, a.grad_accum)}
    if a.pairs:
        stages['dpo'] = (['dpo', a.profile, '--pairs', a.pairs, '--steps', str(a.dpo_steps), '--micro-batch', str(a.dpo_micro_batch)]
                         + (['--lr', str(a.dpo_lr)] if a.dpo_lr else []) + (['--beta', str(a.beta)] if a.beta else []) + base_args, a.dpo_grad_accum)
    launchers = {'single': lambda i: [sys.executable, ENTRY]}
    single_env = {} if a.cpu else {'CUDA_VISIBLE_DEVICES': '0'}   # one GPU visible: TRL refuses nn.DataParallel over several
    if a.cpu:   # torchrun starts the processes; the Trainer picks gloo on CPU
        launchers[f'ddp-gloo-{n}'] = lambda i: [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node', str(n), ENTRY]
    else:
        for kind, cfg in (('ddp', 'ddp.yaml'), ('fsdp2', 'fsdp2.yaml')):
            launchers[f'{kind}-{n}'] = (lambda cfg: lambda i: [sys.executable, '-m', 'accelerate.commands.launch', '--config_file',
                                        str(ROOT / 'configs/accelerate' / cfg), '--num_processes', str(n), '--main_process_port', str(29500 + i), ENTRY])(cfg)
    meta = {'date_utc': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'), 'argv': sys.argv, 'versions': versions(),
            'processes': n, 'env_of_each_run': SAFE_ENV}
    try:
        import torch
        if torch.cuda.is_available():
            meta['gpus'] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            meta['gpu_topology'] = subprocess.run(['nvidia-smi', 'topo', '-m'], capture_output=True, text=True).stdout
    except Exception as e: meta['gpu_error'] = str(e)
    if (work / 'inputs.json').exists(): meta['inputs'] = json.loads((work / 'inputs.json').read_text())
    results = {'meta': meta}
    base = a.base or str(ROOT / 'data/tiny_base')
    i, final = 0, results
    for stage, (args, ga) in stages.items():
        results[stage] = {}
        for name, launch in launchers.items():
            i += 1
            if a.only and f'{stage}:{name}' not in a.only: continue
            out = work / f'{stage}-{name}'
            cmd = launch(i) + args + ['--grad-accum', str(ga if name == 'single' else ga // n), '--out', str(out), '--tag', f'{stage}-{name}']
            print(f"[{time.strftime('%H:%M:%S')}] {stage} {name}: {' '.join(cmd[1:])}", flush=True)
            r = run(cmd, a.timeout, env={'TQDM_DISABLE': '1', 'TRANSFORMERS_VERBOSITY': 'error', 'RSI_STEP_TIMES': '1',
                                         **(single_env if name == 'single' else {})})
            r['command'] = ' '.join(['python'] + cmd[1:]).replace(str(ROOT) + '/', '')
            if r['ok']:
                summarise(out, r)
                try: r['adapter'] = check_adapter(base, str(out))
                except Exception as e: r['adapter'] = {'loads': False, 'error': f"{type(e).__name__}: {e}"[:1000]}
            results[stage][name] = r
            final = merge(json.loads(Path(a.merge).read_text()), results) if a.merge else results
            compare(final, n)
            Path(a.out).parent.mkdir(parents=True, exist_ok=True); Path(a.out).write_text(json.dumps(final, indent=1))
            print(f"[{time.strftime('%H:%M:%S')}] {stage} {name}: ok={r['ok']} {r['seconds']} s", flush=True)
    print(f"{'stage':<5} {'variant':<12} {'ok':<5} {'world':>5} {'eff.b':>5} {'tokens/s':>9} {'full-step':>9} {'speedup':>7} "
          f"{'loss first':>10} {'loss last':>9} {'max|dL|':>8} {'mean|dL|':>8} {'peak GiB/rank':>14} {'adapter':>8}")
    for stage in stages:
        for name, r in final.get(stage, {}).items():
            L = r.get('losses') or [float('nan')]
            peak = '/'.join(str(p['max_allocated_gib']) for p in r.get('peak_memory_gib', [])) or '-'
            ad = r.get('adapter', {})
            print(f"{stage:<5} {name:<12} {str(r['ok']):<5} {r.get('world_size', '-'):>5} {r.get('effective_batch', '-'):>5} "
                  f"{r.get('trainer_tokens_per_s', '-'):>9} {r.get('full_step_tokens_per_s', '-'):>9} {r.get('full_step_speedup_vs_single', '-'):>7} {L[0]:>10} {L[-1]:>9} "
                  f"{r.get('max_abs_loss_diff_vs_single', '-'):>8} {r.get('mean_abs_loss_diff_vs_single', '-'):>8} {peak:>14} "
                  f"{str(ad.get('loads', '-')) + ('/=' if ad.get('weights_equal_file') else ''):>8}")
            if not r['ok']: print(r['error'][-1500:])
            elif ad.get('error') or ad.get('forward_error'): print('adapter:', ad.get('error') or ad.get('forward_error'))


if __name__ == '__main__':
    main()
