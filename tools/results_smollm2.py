"""The real model's results: copy the files the README quotes from a run of configs/smollm2.yaml into results/smollm2/,
and write the README's section about them from those files (between its markers), so that no figure in it is typed
by hand.

    python tools/results_smollm2.py copy [RUN_DIR]      # outputs/smollm2 -> results/smollm2, and the timings JSON
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
DECODES = {'ifeval_harness': "harness: the model's own template and default system turn, greedy, 1,280 new tokens",
           'ifeval': "the study's serving: its template and system prompt, greedy, 2,048 new tokens"}


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


def copy(run_dir: Path, out: Path = RESULTS) -> list[Path]:
    "The files of a run of configs/smollm2.yaml into `out` (its machine's paths made relative), the paired reads, the timings."
    from rsi_repro.stats import load_outcomes, paired
    ev = _eval_dir(run_dir)
    needed = [i for i in READ if i != 'ifeval_harness']     # the harness decode may be the base's alone (evals.only)
    cks = [ck for ck in ('base', 'repair', 'v6141', 'v749') if all((ev / ck / f'{i}.summary.csv').exists() for i in needed)]
    if len(cks) < 2: raise SystemExit(f"{ev}: fewer than two checkpoints with {', '.join(needed)} results")
    read = {ck: [i for i in READ if (ev / ck / f'{i}.summary.csv').exists()] for ck in cks}
    out.mkdir(parents=True, exist_ok=True)
    files = {**{k: v for k, v in STAGE_FILES.items() if (run_dir / k).exists()},
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
    stages = _stage_lines(device / 'smollm2.log') if (device / 'smollm2.log').exists() else []
    run = {'run': run_dir.name, 'profile': 'configs/smollm2.yaml', 'base_source_sha256': manifest['inputs']['data']['base'],
           'checkpoints': cks, 'evaluation': ev.name, 'stages': stages, 'versions': manifest['versions']}
    (out / 'run.json').write_text(json.dumps(run, indent=1, ensure_ascii=False) + '\n'); written += [out / 'paired.csv', out / 'run.json']
    timings = {'what': "configs/smollm2.yaml on one NVIDIA H200 (gpu_study.sh smollm2, 2026-12-04): the runner's stage lines; the lease "
                       "ended while stage 4 (rounds) was still reading its arms, so the timings of the evaluation made by hand after it "
                       "(rsi_repro.evaluate.evaluate_checkpoint, one instrument a call, vLLM in a child process) are beside them. "
                       "No per-stage GPU memory was written: the runner's record (benchmarks/gpu_pipeline.py) is written when a run ends.",
               'stages': [{**s, 'backend': 'vllm', 'peak_gib_per_gpu': None} for s in stages],
               'evaluation_by_hand': _by_hand(device / 'partial_eval.log') if (device / 'partial_eval.log').exists() else [],
               'versions': manifest['versions'], 'gpus': ['NVIDIA H200'], 'date': '2026-12-04'}
    kept = {k: v for k, v in json.loads(TIMINGS.read_text()).items() if k.startswith('run_')} if TIMINGS.exists() else {}
    TIMINGS.write_text(json.dumps({**timings, **kept}, indent=1, ensure_ascii=False) + '\n'); written.append(TIMINGS)   # later runs' records stay
    return written


def _overall(path: Path) -> dict:
    "The overall row (family `(all)`) of an instrument's summary CSV."
    from rsi_repro.stats import ALL
    row = next(r for r in csv.DictReader(path.open()) if r['family'] == ALL)
    return {k: float(v) for k, v in row.items() if k not in ('family', 'checkpoint', 'instrument') and v not in ('', None)}


def _pct(x: float) -> str: return f"{100 * x:.1f}"


def block(res: Path = RESULTS) -> str:
    "The README's section on the real model, from the files in `res`."
    run = json.loads((res / 'run.json').read_text())
    evidence = json.loads((res / 'repair_training_evidence.json').read_text())
    reads = list(csv.DictReader((res / 'paired.csv').open()))
    arms = list(csv.DictReader((res / 'arms.csv').open())) if (res / 'arms.csv').exists() else []
    keep = list(csv.DictReader((res / 'repair_keep_rates.csv').open()))
    ran = [s for s in run['stages'] if s['status'] == 'ran']
    unfinished = [s['stage'] for s in run['stages'] if s['status'] != 'ran']
    lines = [BEGIN,
             f"What a run of `configs/smollm2.yaml` on one NVIDIA H200 found (`results/smollm2/`, copied from it by "
             f"`tools/results_smollm2.py`, which also writes this section; the timings are `benchmarks/results/gpu_pipeline_smollm2.json`). "
             f"The base is SmolLM2-135M-Instruct's Q4_1 GGUF file (sha256 `{run['base_source_sha256'].split(':')[-1][:16]}…`), "
             f"dequantised once into the run and served in bfloat16 by vLLM {run['versions'].get('vllm', '?')}.", '']
    if unfinished:
        took = ', '.join(f"{s['seconds']:.0f} s" for s in ran)
        lines += [f"**The run did not finish.** The stages {', '.join(s['stage'] for s in ran)} ran "
                  f"({took}); the lease ended while {', '.join(unfinished)} was still "
                  f"running (its {len(arms)} arms had trained: `arms.csv`). The checkpoints {' and '.join(run['checkpoints'])} were then "
                  f"evaluated by hand with `rsi_repro.evaluate.evaluate_checkpoint` on the profile's instruments below "
                  f"(`{run['evaluation']}/`); no later stage ran, so there is no decision, grid, pair read or soup for this model yet.", '']
    lines += ["IFEval, Google's 541 prompts, scored by this project's checker (the reference's verdicts: `tests/test_real_model.py` "
              "scores the base's answers with lm-evaluation-harness's IFEval code too), in percent:", '',
              "| checkpoint | decode | n | prompt strict | prompt loose | instruction strict | instruction loose |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for ck in run['checkpoints']:
        for inst, decode in DECODES.items():
            if inst == 'ifeval_harness' and not (res / f'{ck}_{inst}.summary.csv').exists(): continue   # the base's alone (evals.only)
            s = _overall(res / f'{ck}_{inst}.summary.csv')
            lines.append(f"| {ck} | {decode} | {int(s['n'])} | {_pct(s['passed'])} | {_pct(s['passed_loose'])} | "
                         f"{_pct(s['inst_strict'])} | {_pct(s['inst_loose'])} |")
    lines += ['', f"SmolLM2's authors publish {AUTHORS_IFEVAL} for this model (\"average prompt/inst\"; strict or loose not stated). "
              "What differs from their run: Q4_1 weights here (theirs bf16), dequantised to float32 and served in bfloat16; "
              "this project's scorer instead of lighteval's; the harness row otherwise decodes as they did (the template's "
              "default system turn, greedy, 1,280 new tokens).", '',
              f"The repair (stage 3: samples of the model itself that passed the checker, {evidence['steps']} steps of "
              f"{evidence['effective_batch']}, r={evidence['r']}, lr {evidence['lr']:g}) against the model, paired on the same prompts, with the exact sign test on "
              "the prompts they disagree on:", '',
              "| step | instrument | n | parent | checkpoint | Δ | fixed / lost | sign p |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in reads:
        lines.append(f"| {r['step']} | {r['instrument']} | {r['n']} | {float(r['rate_parent']):.3f} | {float(r['rate']):.3f} | "
                     f"{float(r['delta']):+.3f} | {r['fixed']} / {r['lost']} | {float(r['p']):.3g} |")
    moved = lambda insts: all(float(r['p']) < 0.05 and int(r['fixed']) > int(r['lost']) for r in reads if r['instrument'] in insts)
    still = lambda insts: all(float(r['p']) >= 0.05 for r in reads if r['instrument'] in insts)
    said = {(True, True): "the repair fixes more prompts than it loses on the study's own pools (H6 and probe2, sign p < 0.05 on each) "
                          "and does not move IFEval under either decode (sign p >= 0.05): its gain on the study's constraint families "
                          "does not carry to IFEval's own prompts.",
            (True, False): "the repair fixes more prompts than it loses on H6 and probe2 (sign p < 0.05 on each), and IFEval moves too.",
            (False, True): "the repair does not move H6 and probe2 together at sign p < 0.05, nor IFEval.",
            (False, False): "the repair does not move H6 and probe2 together at sign p < 0.05; IFEval moves."}
    lines += ['', "Read as the card reads its own: " + said[(moved(('h6', 'probe2')), still(tuple(DECODES)))]]
    reasons = [r for r in csv.DictReader((res / 'failure_reasons.csv').open()) if r['instrument'] in DECODES]
    lines += ['', "Where the repair's IFEval reads moved, by why the failing side failed (a fixed prompt by the model's reason, a "
              "lost one by the repair's; `failure_reasons.csv`, every instrument):", '',
              "| decode | reason | fixed | lost |", "|---|---|---:|---:|"]
    for r in reasons: lines.append(f"| {r['instrument']} | {r['reason']} | {r['fixed']} | {r['lost']} |")
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
    if said or not cpu.exists(): return said
    return _differs('RESULTS.md', cpu.relative_to(ROOT).as_posix(), cpu_block(cpu), readme_section(results_md.read_text(), CPU_BEGIN, CPU_END))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('what', choices=['copy', 'readme', 'check']); ap.add_argument('run_dir', nargs='?', default=str(ROOT / 'outputs/smollm2'))
    a = ap.parse_args(argv)
    if a.what == 'copy':
        for p in copy(Path(a.run_dir)): print(p.relative_to(ROOT))
        return 0
    if a.what == 'readme':
        path = ROOT / 'README.md'; text = path.read_text()
        path.write_text(text.replace(readme_section(text), block())); print("README.md: the section from results/smollm2")
        if CPU_TIMINGS.exists():
            path = ROOT / 'benchmarks' / 'RESULTS.md'; text = path.read_text()
            path.write_text(text.replace(readme_section(text, CPU_BEGIN, CPU_END), cpu_block()))
            print(f"RESULTS.md: the section from {CPU_TIMINGS.relative_to(ROOT)}")
        return 0
    said = check()
    if said: print(said, file=sys.stderr); return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
