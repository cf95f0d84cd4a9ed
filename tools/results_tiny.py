"""Copy the files the README quotes from a finished demo run into results/tiny/, every absolute path of the machine that
built the run written relative to its project root (a run folder's paths become `outputs/<run>/...`).

    python tools/results_tiny.py                  # outputs/tiny -> results/tiny (`make results`)
    python tools/results_tiny.py RUN_DIR OUT_DIR

The copy refuses a run that is not finished (a stage without its manifest) and, after writing, any file that still
holds an absolute path. Beside the files it writes `outcome_hashes.json` (every per-prompt outcome file's and the
decision's sha256: `python tools/outcome_hashes.py outputs/tiny --against results/tiny/outcome_hashes.json` says
whether a later change kept the demo's behaviour) and `made_by.json` (the commit, and the sha256 of the library's
modules and of the notebooks that made them).
"""
from __future__ import annotations
import argparse, json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'tools'))
HASHES, MADE_BY = 'outcome_hashes.json', 'made_by.json'   # every outcome file's sha256 (tools/outcome_hashes.py), and the code's
# {path in the run folder: name in results/tiny}
FILES = {'report/summary.md': 'summary.md', 'report/summary.json': 'summary.json', 'report/rates.csv': 'rates.csv',
         'repair/mix_target.csv': 'repair_mix_target.csv', 'rounds/arms.csv': 'arms.csv', 'grid/grid_h6.csv': 'grid_h6.csv', 'grid/grid_prior_h6.json': 'grid_prior_h6.json',
         'grid/seed_spread_h6.csv': 'seed_spread_h6.csv', 'decide/decision.json': 'decision.json',
         'decide/judgement.json': 'judgement.json', 'decide/failure_reasons.csv': 'failure_reasons.csv',
         'eval/paired_older.csv': 'paired_older.csv', 'pair_read/pair_read.summary.json': 'pair_read.summary.json',
         'grid/one_se_h6.json': 'one_se_h6.json', 'decide/guard.json': 'guard.json', 'soups/card_verdicts.csv': 'soup_verdicts.csv'}
ABSOLUTE = re.compile(r'''(?:^|[\s"'(=,\[])(/(?:[\w.+-]+/)+[\w.+-]*)''')


def relative(text: str, root: Path) -> str:
    "`text` with every path under `root` (as given and resolved) written relative to it."
    for r in sorted({str(root), str(root.resolve())}, key=len, reverse=True):
        text = text.replace(r.rstrip('/') + '/', '')
    return text


def absolute_paths(text: str) -> list[str]:
    "The absolute paths a text still holds."
    return ABSOLUTE.findall(text)


def copy_results(run_dir: Path, out_dir: Path, root: Path | None = None) -> list[Path]:
    "Copy FILES from a finished run into `out_dir`, paths under the run's project root (`root`: the folder holding outputs/) made relative."
    root = Path(root) if root else Path(run_dir).resolve().parents[1]
    missing = [rel for rel in FILES if not (run_dir / rel).exists()]
    if missing: raise SystemExit(f"{run_dir}: not a finished demo run, missing {', '.join(missing)} (run `make demo`)")
    unfinished = [p.parent.name for p in run_dir.glob('*/.running.json')]
    if unfinished: raise SystemExit(f"{run_dir}: stage(s) {', '.join(sorted(unfinished))} have not finished")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for rel, name in FILES.items():
        text = relative((run_dir / rel).read_text(), root)
        if (left := absolute_paths(text)): raise SystemExit(f"{run_dir / rel}: still holds absolute path(s) {left[:3]}")
        (out_dir / name).write_text(text)
        written.append(out_dir / name)
    from outcome_hashes import run_hashes           # what a later change to the code must keep, or say it changed
    (out_dir / HASHES).write_text(json.dumps(run_hashes(run_dir), indent=1, sort_keys=True) + '\n')
    (out_dir / MADE_BY).write_text(json.dumps(made_by(root), indent=1, sort_keys=True) + '\n')
    return [*written, out_dir / HASHES, out_dir / MADE_BY]


def arithmetic() -> dict:
    """What decides a CPU run's last bits besides the code: the processor's instruction-set flags, the core count (the
    threads torch uses), and the numerical packages' versions. Two machines that agree on these give the demo bit for bit."""
    import hashlib, os, platform
    from importlib import metadata
    flags = next((l.split(':', 1)[1].split() for l in Path('/proc/cpuinfo').read_text().splitlines() if l.startswith('flags')), []) \
        if Path('/proc/cpuinfo').exists() else [platform.processor()]
    versions = {}
    for pkg in ('torch', 'transformers', 'peft', 'trl', 'numpy'):
        try: versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError: versions[pkg] = None
    return {'cpu_flags_sha256': hashlib.sha256(' '.join(sorted(flags)).encode()).hexdigest(), 'cpus': os.cpu_count(),
            'machine': platform.machine(), 'packages': versions}


def made_by(root: Path) -> dict:
    "The code that made a result: the commit, and sha256 of the library's modules and of the notebooks (a dirty tree shows)."
    import hashlib, subprocess
    digest = lambda files: hashlib.sha256(b''.join(f.relative_to(root).as_posix().encode() + b'\0' + f.read_bytes()
                                                   for f in sorted(files))).hexdigest()
    git = lambda *a: subprocess.run(['git', *a], cwd=root, capture_output=True, text=True).stdout.strip()
    return {'commit': git('rev-parse', 'HEAD'), 'uncommitted_changes': bool(git('status', '--porcelain', '--', 'rsi_repro', 'nbs', 'configs')),
            'library_sha256': digest((root / 'rsi_repro').glob('*.py')), 'notebooks_sha256': digest((root / 'nbs').glob('*.ipynb')),
            'profile_sha256': hashlib.sha256((root / 'configs' / 'tiny.yaml').read_bytes()).hexdigest(), 'arithmetic': arithmetic()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('run_dir', nargs='?', default=str(ROOT / 'outputs' / 'tiny'))
    ap.add_argument('out_dir', nargs='?', default=str(ROOT / 'results' / 'tiny'))
    a = ap.parse_args(argv)
    for p in copy_results(Path(a.run_dir), Path(a.out_dir)): print(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p)
    return 0


if __name__ == '__main__':
    sys.exit(main())
