"""The real model's results: copy the files the README quotes from a run of configs/smollm2.yaml into results/smollm2/,
and write the README's section about them from those files (between its markers), so that no figure in it is typed
by hand.

    python tools/results_smollm2.py copy [RUN_DIR] [--record gpu_pipeline_smollm2.json]
                                                        # outputs/smollm2 -> results/smollm2, and the timings JSON (a finished
                                                        # run's record from benchmarks/gpu_pipeline.py run, as its headline)
    python tools/results_smollm2.py readme              # the README's section, written from results/smollm2, and RESULTS.md's
                                                        # from benchmarks/results/cpu_pipeline_smollm2.json
    python tools/results_smollm2.py check               # exit 1, naming the first differing line, when the README's section
                                                        # is not what results/smollm2 gives (tests/test_results_smollm2.py)

A run that did not finish is copied as far as it went: its finished stages (their manifests), and the per-checkpoint
results of an evaluation made by hand with `rsi_repro.evaluate.evaluate_checkpoint` into `eval_partial/` (the GPU
lease of 2026-12-04 ended during stage 4); the section says which.
"""
from __future__ import annotations
import argparse, csv, json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / 'tools'))
from results_tiny import absolute_paths, relative      # noqa: E402  (one way to make a run's paths relative)

RESULTS = ROOT / 'results' / 'smollm2'
TIMINGS = ROOT / 'benchmarks' / 'results' / 'gpu_pipeline_smollm2.json'
BEGIN, END = '<!-- figures from results/smollm2: begin -->', '<!-- figures from results/smollm2: end -->'
READ = ('ifeval_harness', 'ifeval', 'h6', 'probe2')       # the instruments the README reads, in its order
STAGE_FILES = {'repair/sampling/keep_rates_x1.csv': 'repair_keep_rates.csv', 'repair/mix_target.csv': 'repair_mix_target.csv',
               'repair/adapter/training_evidence.json': 'repair_training_evidence.json', 'repair/adapter/log_history.json': 'repair_log_history.json',
               'rounds/arms.csv': 'arms.csv', 'rounds/mix_target.csv': 'rounds_mix_target.csv',
               'rounds/mixes/r6/keep_rates_x1.csv': 'rounds_keep_rates_x1.csv', 'rounds/mixes/r6/keep_rates_x2.csv': 'rounds_keep_rates_x2.csv'}
AUTHORS_IFEVAL = 29.9      # SmolLM2-135M-Instruct's model card: IFEval "average prompt/inst" (lighteval, bf16, greedy, 1,280 tokens)
DECODES = {'ifeval_harness': "harness: the model's own template and default system turn, greedy, {n} new tokens",
           'ifeval': "the study's serving: its template and system prompt, greedy, {n} new tokens"}


def _eval_dir(run_dir: Path) -> Path:
    "The run's evaluation: its eval stage when it finished, else the evaluation made by hand (eval_partial/)."
    return run_dir / 'eval' if (run_dir / 'eval' / 'manifest.json').exists() else run_dir / 'eval_partial'


def _stage_lines(log: Path) -> list[dict]:
    "The stage lines of the runner's log: each stage that finished, with its seconds, and the one still running."
    out = []
    for line in log.read_text().splitlines():
        if m := re.match(r'^\[([a-z_0-9]+)\] done in ([\d.]+)s', line): out.append({'stage': m[1], 'status': 'ran', 'seconds': float(m[2])})
        elif m := re.match(r'^\[([a-z_0-9]+)\] running', line): out.append({'stage': m[1], 'status': 'unfinished', 'seconds': None})
    done = {s['stage'] for s in out if s['status'] == 'ran'}
    return [s for s in out if s['status'] == 'ran' or s['stage'] not in done]


def _by_hand(log: Path) -> list[dict]:
    "The evaluation made by hand: `<checkpoint> <instrument> <n> <pass rate> <seconds> s` lines."
    rows = []
    for line in log.read_text().splitlines():
        if m := re.match(r'^(\w+) (\w+) (\d+) ([\d.]+) ([\d.]+) s$', line):
            rows.append({'checkpoint': m[1], 'instrument': m[2], 'n': int(m[3]), 'passed': float(m[4]), 'seconds': float(m[5])})
    return rows


STEPS_FILES = {'decide/decision.json': 'decision_v6141.json', 'decide_v749/decision.json': 'decision_v749.json',
               'grid/grid_h6.csv': 'grid_h6.csv', 'grid/seed_spread_h6.csv': 'grid_seed_spread_h6.csv', 'grid/one_se_h6.json': 'grid_one_se_h6.json',
               'soups/card_verdicts.csv': 'soups_verdicts.csv', 'soups/soups_vs_parents.csv': 'soups_vs_parents.csv',
               'soups/degeneracy.csv': 'soups_degeneracy.csv', 'pair_read/pair_read.summary.json': 'pair_read_summary.json',
               'eval/paired.csv': 'eval_paired.csv'}


def _decodes() -> dict:
    "The new-token limits of the study's serving and of the harness decode, from the profile the run was made with."
    from rsi_repro.config import load_profile
    prof = load_profile(ROOT / 'configs' / 'smollm2.yaml')
    return {'ifeval': prof.serving.max_new_tokens, 'ifeval_harness': prof.evals.ifeval_harness.max_new_tokens}


def _record_stages(record: dict, run_dir: Path) -> list[dict]:
    "Each stage of the runner's record (seconds, GPU memory, backend), the base's conversion first (the run's own times)."
    base = [json.loads(l) for l in (run_dir / 'run_times.jsonl').read_text().splitlines() if '"stage": "base"' in l][:1]
    return ([{'stage': 'base', 'status': 'ran', 'seconds': base[0]['seconds']}] if base else []) + [
        {'stage': s['stage'], 'status': s['status'], 'seconds': s['seconds']} for s in record['run']['stages']]


def copy(run_dir: Path, out: Path = RESULTS, record: Path | None = None, commit: str | None = None) -> list[Path]:
    """The files of a run of configs/smollm2.yaml into `out` (its machine's paths made relative), the paired reads, and
    the timings: `record` is `benchmarks/gpu_pipeline.py run`'s JSON of a run that finished (per stage: seconds, GPU
    memory, backend; the versions), which becomes the timings file's headline; earlier runs' records stay beside it."""
    from rsi_repro.stats import load_outcomes, paired
    ev = _eval_dir(run_dir)
    needed = [i for i in READ if i != 'ifeval_harness']     # the harness decode may be the base's alone (evals.only)
    cks = [ck for ck in ('base', 'repair', 'v6141', 'v749') if all((ev / ck / f'{i}.summary.csv').exists() for i in needed)]
    if len(cks) < 2: raise SystemExit(f"{ev}: fewer than two checkpoints with {', '.join(needed)} results")
    read = {ck: [i for i in READ if (ev / ck / f'{i}.summary.csv').exists()] for ck in cks}
    for old in out.glob('*') if out.exists() else []: old.unlink()       # a result folder is one run's
    out.mkdir(parents=True, exist_ok=True)
    files = {**{k: v for k, v in {**STAGE_FILES, **STEPS_FILES}.items() if (run_dir / k).exists()},
             **{f'{ev.name}/{ck}/{i}.{kind}': f'{ck}_{i}.{kind}' for ck in cks for i in read[ck] for kind in ('summary.csv', 'outcomes.jsonl')}}
    written = []
    for rel, name in files.items():
        text = relative((run_dir / rel).read_text(), run_dir.resolve().parents[1])
        if left := absolute_paths(text): raise SystemExit(f"{run_dir / rel}: still holds absolute path(s) {left[:3]}")
        (out / name).write_text(text); written.append(out / name)
    reads = []
    both = lambda parent, ck: [i for i in READ if i in read[parent] and i in read[ck]]
    for parent, ck in zip(cks, cks[1:]):
        for i in both(parent, ck):
            s = paired(load_outcomes(out / f'{parent}_{i}.outcomes.jsonl', parent), load_outcomes(out / f'{ck}_{i}.outcomes.jsonl', ck))
            reads.append({'step': f'{parent} → {ck}', 'instrument': i, 'n': s.n, 'rate_parent': s.rate_a, 'rate': s.rate_b,
                          'delta': s.delta, 'fixed': s.fixed, 'lost': s.lost, 'p': s.p, 'se': s.se})
    with (out / 'paired.csv').open('w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=list(reads[0])); w.writeheader(); w.writerows(reads)
    from rsi_repro.judgement import failure_reasons
    import pandas as pd
    frames = [failure_reasons(load_outcomes(out / f'{parent}_{i}.outcomes.jsonl', parent), load_outcomes(out / f'{ck}_{i}.outcomes.jsonl', ck))
              .assign(step=f'{parent} → {ck}', instrument=i) for parent, ck in zip(cks, cks[1:]) for i in both(parent, ck)]
    pd.concat(frames)[['step', 'instrument', 'reason', 'fixed', 'lost', 'discordant']].to_csv(out / 'failure_reasons.csv', index=False)
    written.append(out / 'failure_reasons.csv')
    manifest = json.loads((run_dir / 'repair' / 'manifest.json').read_text())
    device = run_dir / '_device'
    rec = json.loads(record.read_text()) if record else None
    if rec: stages = _record_stages(rec, run_dir)
    else: stages = _stage_lines(device / 'smollm2.log') if (device / 'smollm2.log').exists() else []
    run = {'run': run_dir.name, 'profile': 'configs/smollm2.yaml', **({'commit': commit} if commit else {}),
           'base_source_sha256': manifest['inputs']['data']['base'],
           'device': rec['run']['versions']['gpus'][0] if rec else 'NVIDIA H200', 'date': rec['run']['date'] if rec else '2026-12-04',
           'checkpoints': cks, 'evaluation': ev.name, 'decodes_max_new_tokens': _decodes(), 'stages': stages,
           **({'rerun': rec['run']['rerun']} if rec else {}), 'versions': manifest['versions']}
    (out / 'run.json').write_text(json.dumps(run, indent=1, ensure_ascii=False) + '\n'); written += [out / 'paired.csv', out / 'run.json']
    earlier = json.loads(TIMINGS.read_text()) if TIMINGS.exists() else {}
    kept = {k: v for k, v in earlier.items() if k.startswith('run_') and k != 'run'}        # later runs' records stay
    if rec:
        if 'stages' in earlier and 'run_2026_12_04' not in kept:        # the 12-04 partial run's record, headline until now
            kept = {'run_2026_12_04': {k: v for k, v in earlier.items() if not k.startswith('run_')}, **kept}
        timings = {'what': f"configs/smollm2.yaml on one {run['device']} ({rec['run']['date']}): benchmarks/gpu_pipeline.py run from a clean "
                           "folder (every stage, then the profile again); per stage its seconds, the GPU's peak memory (NVML), the "
                           "backend, the notebook's cells and the timed parts (engine loads, decodes, training)", **rec}
    else:
        timings = {'what': "configs/smollm2.yaml on one NVIDIA H200 (gpu_study.sh smollm2, 2026-12-04): the runner's stage lines; the lease "
                           "ended while stage 4 (rounds) was still reading its arms, so the timings of the evaluation made by hand after it "
                           "(rsi_repro.evaluate.evaluate_checkpoint, one instrument a call, vLLM in a child process) are beside them. "
                           "No per-stage GPU memory was written: the runner's record (benchmarks/gpu_pipeline.py) is written when a run ends.",
                   'stages': [{**s, 'backend': 'vllm', 'peak_gib_per_gpu': None} for s in stages],
                   'evaluation_by_hand': _by_hand(device / 'partial_eval.log') if (device / 'partial_eval.log').exists() else [],
                   'versions': manifest['versions'], 'gpus': ['NVIDIA H200'], 'date': '2026-12-04'}
    TIMINGS.write_text(json.dumps({**timings, **kept}, indent=1, ensure_ascii=False) + '\n'); written.append(TIMINGS)
    return written


def _overall(path: Path) -> dict:
    "The overall row (family `(all)`) of an instrument's summary CSV."
    from rsi_repro.stats import ALL
    row = next(r for r in csv.DictReader(path.open()) if r['family'] == ALL)
    return {k: float(v) for k, v in row.items() if k not in ('family', 'checkpoint', 'instrument') and v not in ('', None)}


def _pct(x: float) -> str: return f"{100 * x:.1f}"


def _decode_text(run: dict, inst: str) -> str:
    "How an IFEval read decoded, with the new-token limit the run used (run.json names it: no limit is assumed)."
    n = run['decodes_max_new_tokens'][inst]
    return DECODES[inst].format(n=f"{n:,}")


def _step_said(step: str, reads: list[dict]) -> str:
    "One step's reads as the card reads its own: the study's pools, then IFEval under each decode."
    mine = {r['instrument']: r for r in reads if r['step'] == step}
    def verdict(i):
        r = mine[i]; f, l, p = int(r['fixed']), int(r['lost']), float(r['p'])
        moved = ('a gain' if f > l else 'a loss') if p < 0.05 else 'no difference'
        return f"{i} {f} fixed / {l} lost (sign p {p:.3g}: {moved} at p < 0.05)"
    pools = [verdict(i) for i in ('h6', 'probe2') if i in mine]
    ifeval = [verdict(i) for i in DECODES if i in mine]
    return f"**{step}**: " + '; '.join(pools) + ('; on IFEval\'s own prompts ' + '; '.join(ifeval) if ifeval else '') + '.'


def _decision_line(path: Path) -> str:
    "A sealed decision in one line: promoted or not, and each clause with its evidence."
    d = json.loads(path.read_text())
    said = []
    for c in d['clauses']:
        e, inst = c['evidence'], c['params'].get('instrument', '')
        if 'delta' in e and 'fixed' in e:
            said.append(f"{c['kind']} {inst}: Δ {e['delta']:+.3f} ({e['fixed']} / {e['lost']}, p {e['p']:.2g}) {'passed' if c['passed'] else 'failed'}")
        else:
            worst = f"worst family {e['worst']} {e['worst_delta']:+.3f}" if e.get('worst') else ''
            said.append(f"{c['kind']} {inst}: {worst} {'passed' if c['passed'] else 'failed'}".replace('  ', ' '))
    return f"| {d['candidate']} against {d['incumbent']} | {'**promote**' if d['promote'] else 'do not promote'} | {'; '.join(said)} |"


def block(res: Path = RESULTS) -> str:
    "The README's section on the real model, from the files in `res`."
    run = json.loads((res / 'run.json').read_text())
    evidence = json.loads((res / 'repair_training_evidence.json').read_text())
    reads = list(csv.DictReader((res / 'paired.csv').open()))
    arms = list(csv.DictReader((res / 'arms.csv').open())) if (res / 'arms.csv').exists() else []
    keep = list(csv.DictReader((res / 'repair_keep_rates.csv').open()))
    ran = [s for s in run['stages'] if s['status'] == 'ran']
    unfinished = [s['stage'] for s in run['stages'] if s['status'] != 'ran']
    made = f" (commit {run['commit']})" if 'commit' in run else ''
    lines = [BEGIN,
             f"What a run of `configs/smollm2.yaml`{made} on one "
             f"{run['device']} found ({run['date']}; "
             f"`results/smollm2/`, copied from it by `tools/results_smollm2.py`, which also writes this section; the timings are "
             f"`benchmarks/results/gpu_pipeline_smollm2.json`). The base is SmolLM2-135M-Instruct's Q4_1 GGUF file (sha256 "
             f"`{run['base_source_sha256'].split(':')[-1][:16]}…`), dequantised once into the run and served in bfloat16 by vLLM "
             f"{run['versions'].get('vllm', '?')}. Every figure here is that model's.", '']
    if unfinished:
        took = ', '.join(f"{s['seconds']:.0f} s" for s in ran)
        lines += [f"**The run did not finish.** The stages {', '.join(s['stage'] for s in ran)} ran "
                  f"({took}); the lease ended while {', '.join(unfinished)} was still "
                  f"running (its {len(arms)} arms had trained: `arms.csv`). The checkpoints {' and '.join(run['checkpoints'])} were then "
                  f"evaluated by hand with `rsi_repro.evaluate.evaluate_checkpoint` on the profile's instruments below "
                  f"(`{run['evaluation']}/`); no later stage ran, so there is no decision, grid, pair read or soup for this model yet.", '']
    else:
        stages = [s for s in ran if s['stage'] != 'base']
        base = next((s['seconds'] for s in ran if s['stage'] == 'base'), None)
        lines += [f"Every stage ran: {len(stages)} stages in {sum(s['seconds'] for s in stages) / 60:.1f} minutes"
                  + (f", after {base:.0f} s converting the base" if base is not None else '')
                  + (f"; the profile run again skipped every stage in {run['rerun']['wall_seconds']:.1f} s" if run.get('rerun') else '')
                  + ". The lineage is base → repair (stage 3, rejection-sampled from the model itself) → v6141 (stage 4), "
                  "then v749 (stage 4's double mix from v6141), as the card's.", '']
    lines += ["IFEval, Google's 541 prompts, scored by this project's checker (the reference's verdicts: `tests/test_real_model.py` "
              "scores the base's answers with lm-evaluation-harness's IFEval code too), in percent:", '',
              "| checkpoint | decode | n | prompt strict | prompt loose | instruction strict | instruction loose | average prompt/inst, strict / loose |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for ck in run['checkpoints']:
        for inst in DECODES:
            if inst == 'ifeval_harness' and not (res / f'{ck}_{inst}.summary.csv').exists(): continue   # the base's alone (evals.only)
            s = _overall(res / f'{ck}_{inst}.summary.csv')
            lines.append(f"| {ck} | {_decode_text(run, inst)} | {int(s['n'])} | {_pct(s['passed'])} | {_pct(s['passed_loose'])} | "
                         f"{_pct(s['inst_strict'])} | {_pct(s['inst_loose'])} | {_pct((s['passed'] + s['inst_strict']) / 2)} / "
                         f"{_pct((s['passed_loose'] + s['inst_loose']) / 2)} |")
    lines += ['', f"SmolLM2's authors publish {AUTHORS_IFEVAL} for this model (\"average prompt/inst\", the mean of the prompt-level "
              "and instruction-level accuracies; strict or loose not stated: the last column). "
              "What differs from their run: Q4_1 weights here (theirs bf16), dequantised to float32 and served in bfloat16; "
              "this project's scorer instead of lighteval's; the harness row otherwise decodes as they did (the template's "
              "default system turn, greedy, 1,280 new tokens).", '',
              f"Each step against its parent, paired on the same prompts, with the exact sign test on the prompts they disagree "
              f"on (the repair: {evidence['steps']} steps of {evidence['effective_batch']}, r={evidence['r']}, lr {evidence['lr']:g}):", '',
              "| step | instrument | n | parent | checkpoint | Δ | fixed / lost | sign p |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in reads:
        lines.append(f"| {r['step']} | {r['instrument']} | {r['n']} | {float(r['rate_parent']):.3f} | {float(r['rate']):.3f} | "
                     f"{float(r['delta']):+.3f} | {r['fixed']} / {r['lost']} | {float(r['p']):.3g} |")
    lines += ['', "Read as the card reads its own:", '']
    lines += [f"- {_step_said(step, reads)}" for step in dict.fromkeys(r['step'] for r in reads)]
    decisions = [res / f for f in ('decision_v6141.json', 'decision_v749.json') if (res / f).exists()]
    if decisions:
        lines += ['', "The sealed promotion rule (`promotion:` in the profile, written before the evaluation):", '',
                  "| candidate | verdict | clauses |", "|---|---|---|"] + [_decision_line(p) for p in decisions]
    if (res / 'grid_h6.csv').exists():
        one_se = json.loads((res / 'grid_one_se_h6.json').read_text())
        lines += ['', f"The grid of arms on H6 against the champion {one_se['champion']} (every arm 100 steps; v741 and v742 are "
                  f"the champion's recipe with two other seeds):", '', "| arm | mix | warm start | seed | Δ | fixed / lost | sign p |",
                  "|---|---|---|---:|---:|---:|---:|"]
        lines += [f"| {g['cell']} | {g['mix']} | {g['init']} | {g['seed']} | {float(g['delta']):+.3f} | {g['fixed/lost']} | "
                  f"{float(g['p']):.3g} |" for g in csv.DictReader((res / 'grid_h6.csv').open())]
        spread = next(csv.DictReader((res / 'grid_seed_spread_h6.csv').open()))
        lines += ['', f"The seeds of one recipe differ by {float(spread['spread']):.3f} on H6 ({spread['deltas']}); the one-SE rule "
                  f"reads: {one_se['why']}."]
    if (res / 'soups_verdicts.csv').exists():
        lines += ['', "Soups of two stage-3 seeds (11 and 12), each read against both parents on H6 and open chat:", '',
                  "| soup | net fixed against a parent (min, max) | degenerate answers (parents' worst) | verdict |", "|---|---:|---:|---|"]
        lines += [f"| {v['soup']} | {v['net_fixed_min']}, {v['net_fixed_max']} | {float(v['degenerate_share']):.3f} "
                  f"({float(v['parents_worst_share']):.3f}) | {v['verdict']} |" for v in csv.DictReader((res / 'soups_verdicts.csv').open())]
    reasons = [r for r in csv.DictReader((res / 'failure_reasons.csv').open()) if r['instrument'] in DECODES]
    lines += ['', "Where each step's IFEval reads moved, by why the failing side failed (a fixed prompt by the parent's reason, a "
              "lost one by the checkpoint's; `failure_reasons.csv`, every instrument):", '',
              "| step | decode | reason | fixed | lost |", "|---|---|---|---:|---:|"]
    for r in reasons: lines.append(f"| {r['step']} | {r['instrument']} | {r['reason']} | {r['fixed']} | {r['lost']} |")
    every = next(r for r in keep if r[''] == '(all)')
    lines += ['', f"What the repair could sample from the model ({int(every['samples']) // int(every['prompts'])} samples a prompt; kept: "
              "passed the checker and stopped by itself, at most two a prompt):", '', "| family | prompts | samples | passed | kept | pass rate |", "|---|---:|---:|---:|---:|---:|"]
    for r in keep:
        lines.append(f"| {r[''] or '(all)'} | {r['prompts']} | {r['samples']} | {r['passed']} | {r['kept']} | {float(r['pass_rate']):.3f} |")
    lines.append(END)
    return '\n'.join(lines)


CPU_TIMINGS = ROOT / 'benchmarks' / 'results' / 'cpu_pipeline_smollm2.json'
CPU_BEGIN, CPU_END = ('<!-- figures from benchmarks/results/cpu_pipeline_smollm2.json: begin -->',
                      '<!-- figures from benchmarks/results/cpu_pipeline_smollm2.json: end -->')


def cpu_block(path: Path = CPU_TIMINGS) -> str:
    "RESULTS.md's section on the real model's CPU profile: every stage's seconds, the total and the rerun, from its JSON."
    r = json.loads(path.read_text())['run']
    lines = [CPU_BEGIN, f"`python benchmarks/gpu_pipeline.py run {r['profile']} --out {path.relative_to(ROOT)}` on this project's "
             f"2-core CPU machine, alone ({r['date']}; Python {r['versions']['python']}, torch {r['versions']['torch']}, transformers "
             f"{r['versions']['transformers']}): the run folder deleted, every stage run, then the profile run again.", '',
             "| stage | seconds |", "|---|---:|"]
    lines += [f"| {s['stage']} | {s['seconds']:.1f} |" for s in r['stages']]
    lines += [f"| **all {len(r['stages'])} stages** | **{r['stage_seconds']:.1f}** |", '',
              f"The whole run took {r['wall_seconds'] / 60:.1f} minutes of wall time (the base's conversion included); the rerun "
              f"{', '.join(r['rerun']['statuses'])} every stage in {r['rerun']['wall_seconds']:.1f} s.", CPU_END]
    return '\n'.join(lines)


GPU_BEGIN, GPU_END = ('<!-- figures from benchmarks/results/gpu_pipeline_smollm2.json: begin -->',
                      '<!-- figures from benchmarks/results/gpu_pipeline_smollm2.json: end -->')
PARTS = (('engine_load:started', 'engines started'), ('engine_load:reloaded', 'weights reloaded'), ('decode', 'decoding'),
         ('train', 'training'), ('merge', 'merging adapters'))


def gpu_block(path: Path = TIMINGS) -> str:
    "RESULTS.md's table of the real model's full GPU run: every stage's seconds, peak GPU memory and timed parts."
    rec = json.loads(path.read_text())
    r = rec['run']
    lines = [GPU_BEGIN, f"`bash benchmarks/device/gpu_study.sh smollm2` (`benchmarks/gpu_pipeline.py run configs/smollm2.yaml`) on one "
             f"{r['versions']['gpus'][0]} ({r['date']}; vLLM {r['versions']['vllm']}, torch {r['versions']['torch']}): the run folder "
             "deleted, every stage run, then the profile run again. Peak memory is the GPU's (NVML every 0.2 s: the three engines "
             "stay loaded beside training); the parts are the seconds the library timed inside the stage.", '',
             "| stage | seconds | peak GiB | " + ' | '.join(name for _, name in PARTS) + " |", "|---|---:|---:|" + "---:|" * len(PARTS)]
    for s in r['stages']:
        parts = s.get('parts', {})
        cells = [f"{parts[k]['seconds']:.1f}" if k in parts else '' for k, _ in PARTS]
        lines.append(f"| {s['stage']} | {s['seconds']:.1f} | {max(s['peak_gib_per_gpu']):.1f} | " + ' | '.join(cells) + " |")
    trained = r['training_runs']
    lines += [f"| **all {len(r['stages'])} stages** | **{r['stage_seconds']:.1f}** | | | | | | |", '',
              f"The whole run took {r['wall_seconds'] / 60:.1f} minutes of wall time (the base's conversion included); the rerun "
              f"{', '.join(r['rerun']['statuses'])} every stage in {r['rerun']['wall_seconds']:.1f} s. Its {len(trained)} training runs "
              f"(100 steps of 48 examples each, r=128) took {min(t['wall_seconds'] for t in trained):.1f}-"
              f"{max(t['wall_seconds'] for t in trained):.1f} s each.", GPU_END]
    return '\n'.join(lines)


def readme_section(readme: str, begin: str = BEGIN, end: str = END) -> str:
    "A document's current section between two markers."
    if begin not in readme or end not in readme: raise SystemExit(f"no {begin} ... {end} markers")
    return readme[readme.index(begin):readme.index(end) + len(end)]


def _differs(doc: str, what: str, want: str, have: str) -> str | None:
    want, have = want.splitlines(), have.splitlines()
    if want == have: return None
    i = next(i for i, (x, y) in enumerate(zip(want + [''], have + [''])) if x != y)
    return (f"{doc}'s {what} section differs from what {what} gives, at its line {i + 1}:\n"
            f"  {doc}: {(have + [''])[i]}\n  {what}: {(want + [''])[i]}\nrun `python tools/results_smollm2.py readme`")

def check(readme_path: Path = ROOT / 'README.md', res: Path = RESULTS, results_md: Path = ROOT / 'benchmarks' / 'RESULTS.md',
          cpu: Path = CPU_TIMINGS) -> str | None:
    "None when the README's and RESULTS.md's sections are what their files give, else the first differing line, said."
    said = _differs('README.md', 'results/smollm2', block(res), readme_section(readme_path.read_text()))
    if said: return said
    if cpu.exists() and (said := _differs('RESULTS.md', cpu.relative_to(ROOT).as_posix(), cpu_block(cpu),
                                           readme_section(results_md.read_text(), CPU_BEGIN, CPU_END))): return said
    return _differs('RESULTS.md', TIMINGS.relative_to(ROOT).as_posix(), gpu_block(), readme_section(results_md.read_text(), GPU_BEGIN, GPU_END))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('what', choices=['copy', 'readme', 'check']); ap.add_argument('run_dir', nargs='?', default=str(ROOT / 'outputs/smollm2'))
    ap.add_argument('--record', help="benchmarks/gpu_pipeline.py run's JSON of the run (a run that finished)")
    ap.add_argument('--commit', help="the commit the run was made from (recorded in run.json, named in the README)")
    a = ap.parse_args(argv)
    if a.what == 'copy':
        for p in copy(Path(a.run_dir), record=Path(a.record) if a.record else None, commit=a.commit): print(p.relative_to(ROOT))
        return 0
    if a.what == 'readme':
        path = ROOT / 'README.md'; text = path.read_text()
        path.write_text(text.replace(readme_section(text), block())); print("README.md: the section from results/smollm2")
        if CPU_TIMINGS.exists():
            path = ROOT / 'benchmarks' / 'RESULTS.md'; text = path.read_text()
            path.write_text(text.replace(readme_section(text, CPU_BEGIN, CPU_END), cpu_block()))
            print(f"RESULTS.md: the section from {CPU_TIMINGS.relative_to(ROOT)}")
        path = ROOT / 'benchmarks' / 'RESULTS.md'; text = path.read_text()
        path.write_text(text.replace(readme_section(text, GPU_BEGIN, GPU_END), gpu_block()))
        print(f"RESULTS.md: the section from {TIMINGS.relative_to(ROOT)}")
        return 0
    said = check()
    if said: print(said, file=sys.stderr); return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
