"""The real model's results: copy the files the README quotes from a finished run of configs/smollm2.yaml into
results/smollm2/, and write the README's section about them from those files (between its markers), so that no figure
in it is typed by hand.

    python tools/results_smollm2.py copy [RUN_DIR]      # outputs/smollm2 -> results/smollm2 (a finished run only)
    python tools/results_smollm2.py readme              # the README's section, written from results/smollm2
    python tools/results_smollm2.py check               # exit 1, naming the first differing line, when the README's section
                                                        # is not what results/smollm2 gives (tests/test_results_smollm2.py)
"""
from __future__ import annotations
import argparse, csv, json, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'tools'))
from results_tiny import absolute_paths, relative      # noqa: E402  (one way to make a run's paths relative)

RESULTS = ROOT / 'results' / 'smollm2'
BEGIN, END = '<!-- figures from results/smollm2: begin -->', '<!-- figures from results/smollm2: end -->'
# {path in the run folder: name in results/smollm2}; the eval stage's files for the lineage's first and last checkpoints
FILES = {'report/summary.json': 'summary.json', 'report/summary.md': 'summary.md', 'report/rates.csv': 'rates.csv',
         'base/source.json': 'base_source.json', 'repair/sampling/keep_rates_x1.csv': 'repair_keep_rates.csv',
         'repair/mix_target.csv': 'repair_mix_target.csv', 'rounds/arms.csv': 'arms.csv', 'rounds/mix_target.csv': 'rounds_mix_target.csv',
         'grid/grid_h6.csv': 'grid_h6.csv', 'grid/grid_prior_h6.json': 'grid_prior_h6.json', 'grid/seed_spread_h6.csv': 'seed_spread_h6.csv',
         'decide/decision.json': 'decision.json', 'decide/judgement.json': 'judgement.json',
         'decide/failure_reasons.csv': 'failure_reasons.csv', 'decide_v749/decision.json': 'decision_v749.json',
         'pair_read/pair_read.summary.json': 'pair_read.summary.json',
         **{f'eval/{ck}/{inst}.summary.csv': f'{ck}_{inst}.summary.csv' for ck in ('base', 'v6141')
            for inst in ('ifeval', 'ifeval_harness', 'h6', 'probe2')}}
AUTHORS_IFEVAL = 29.9      # SmolLM2-135M-Instruct's model card: IFEval "average prompt/inst" (lighteval, bf16, greedy, 1,280 tokens)


def copy(run_dir: Path, out: Path = RESULTS) -> list[Path]:
    "FILES of a finished run into `out`, its machine's paths made relative."
    missing = [rel for rel in FILES if not (run_dir / rel).exists()]
    if missing: raise SystemExit(f"{run_dir}: not a finished run of configs/smollm2.yaml, missing {', '.join(missing)}")
    if unfinished := [p.parent.name for p in run_dir.glob('*/.running.json')]:
        raise SystemExit(f"{run_dir}: stage(s) {', '.join(sorted(unfinished))} have not finished")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for rel, name in FILES.items():
        text = relative((run_dir / rel).read_text(), run_dir.resolve().parents[1])
        if left := absolute_paths(text): raise SystemExit(f"{run_dir / rel}: still holds absolute path(s) {left[:3]}")
        (out / name).write_text(text); written.append(out / name)
    return written


def _overall(path: Path) -> dict:
    "The overall row (family `(all)`) of an instrument's summary CSV, numbers as floats."
    from rsi_repro.stats import ALL
    row = next(r for r in csv.DictReader(path.open()) if r['family'] == ALL)
    return {k: float(v) if v not in ('', None) and k not in ('family', 'checkpoint', 'instrument') else v for k, v in row.items()}


def _pct(x: float) -> str: return f"{100 * x:.1f}"


def ifeval_rows(res: Path) -> list[dict]:
    "IFEval's four accuracies for the base and the last checkpoint under both decodes, with the authors' kind of average."
    out = []
    for ck in ('base', 'v6141'):
        for inst, decode in (('ifeval_harness', "harness: the model's own template and system turn, greedy, 1,280 new tokens"),
                             ('ifeval', "the study's serving: its template and system prompt, greedy, 2,048 new tokens")):
            s = _overall(res / f'{ck}_{inst}.summary.csv')
            out.append({'checkpoint': ck, 'decode': decode, 'n': int(s['n']), 'prompt_strict': s['passed'], 'prompt_loose': s['passed_loose'],
                        'inst_strict': s['inst_strict'], 'inst_loose': s['inst_loose'],
                        'average': (s['passed'] + s['inst_strict'] + s['passed_loose'] + s['inst_loose']) / 4})
    return out


def block(res: Path = RESULTS) -> str:
    "The README's section on the real model, from the files in `res`."
    summary = json.loads((res / 'summary.json').read_text())
    source = json.loads((res / 'base_source.json').read_text())
    decision = json.loads((res / 'decision.json').read_text())
    keep = list(csv.DictReader((res / 'repair_keep_rates.csv').open()))
    lines = [BEGIN,
             f"What one run of `configs/smollm2.yaml` found (`results/smollm2/`, copied from that run by `tools/results_smollm2.py`, "
             f"which also writes this section; each stage's wall time, peak GPU memory, backend and versions are in "
             f"`benchmarks/results/gpu_pipeline_smollm2.json`). The base is SmolLM2-135M-Instruct's Q4_1 GGUF file "
             f"(sha256 `{source['source_sha256'].split(':')[-1][:16]}…`), dequantised once into the run and served in bfloat16.", '',
             "IFEval, Google's 541 prompts, scored by this project's checker (the reference's verdicts: "
             "`tests/test_real_model.py` scores the real model's answers with lm-evaluation-harness's IFEval code too):", '',
             "| checkpoint | decode | n | prompt strict | prompt loose | instruction strict | instruction loose | mean of the four |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in ifeval_rows(res):
        lines.append(f"| {r['checkpoint']} | {r['decode']} | {r['n']} | {_pct(r['prompt_strict'])} | {_pct(r['prompt_loose'])} | "
                     f"{_pct(r['inst_strict'])} | {_pct(r['inst_loose'])} | {_pct(r['average'])} |")
    lines += ['', f"SmolLM2's authors publish {AUTHORS_IFEVAL} for this model (\"average prompt/inst\", strict or loose not stated). "
              "What differs from their run: Q4_1 weights here (theirs bf16), dequantised to float and run in bfloat16; vLLM 0.26 "
              "here and in theirs, but this project's scorer instead of lighteval's; the same greedy decode, 1,280 new tokens and "
              "default system turn in the harness row.", '',
              "Each step of the lineage, read against its parent on the same prompts, with the exact sign test on the prompts "
              "they disagree on:", '',
              "| step | instrument | n | parent | checkpoint | Δ | fixed / lost | sign p |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in summary['ladder']:
        lines.append(f"| {r['step']} | {r['instrument']} | {r['n']} | {r['rate_parent']:.3f} | {r['rate']:.3f} | {r['delta']:+.3f} | "
                     f"{r['fixed']} / {r['lost']} | {r['p']:.3g} |")
    verdict = 'promote' if decision['promote'] else 'keep'
    lines += ['', f"The sealed rule says **{verdict}** {decision['candidate']} over {decision['incumbent']} "
                  f"(`decision.json`: {', '.join(('passes' if c['passed'] else 'fails') + ' ' + c['kind'] for c in decision['clauses'])}).", '',
              "What the repair could sample from the model itself (k samples per prompt; kept: passed the checker and stopped by itself):", '',
              "| family | prompts | samples | passed | kept | pass rate |", "|---|---:|---:|---:|---:|---:|"]
    for r in keep:
        lines.append(f"| {r[''] or '(all)'} | {r['prompts']} | {r['samples']} | {r['passed']} | {r['kept']} | {float(r['pass_rate']):.3f} |")
    lines.append(END)
    return '\n'.join(lines)


def readme_section(readme: str) -> str:
    "The README's current section between the markers."
    if BEGIN not in readme or END not in readme: raise SystemExit(f"README.md: no {BEGIN} ... {END} markers")
    return readme[readme.index(BEGIN):readme.index(END) + len(END)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('what', choices=['copy', 'readme', 'check']); ap.add_argument('run_dir', nargs='?', default=str(ROOT / 'outputs/smollm2'))
    a = ap.parse_args(argv)
    if a.what == 'copy':
        for p in copy(Path(a.run_dir)): print(p.relative_to(ROOT))
        return 0
    path = ROOT / 'README.md'; readme = path.read_text()
    want, have = block(), readme_section(readme)
    if a.what == 'readme':
        path.write_text(readme.replace(have, want)); print(f"README.md: the section from results/smollm2 ({len(want.splitlines())} lines)")
        return 0
    if want == have: return 0
    first = next(i for i, (x, y) in enumerate(zip(want.splitlines() + [''], have.splitlines() + [''])) if x != y)
    print(f"README.md's results/smollm2 section differs from what results/smollm2 gives, at its line {first + 1}:\n"
          f"  README:  {(have.splitlines() + [''])[first]}\n  results: {(want.splitlines() + [''])[first]}\n"
          "run `python tools/results_smollm2.py readme`", file=sys.stderr)
    return 1


if __name__ == '__main__':
    sys.exit(main())
