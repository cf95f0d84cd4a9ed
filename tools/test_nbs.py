"""`make test-nbs`: the library notebooks' tests as `nbdev_test` runs them (nbdev's `test_nb` on each notebook, in a pool
of worker processes, the project's skip flags), the slowest notebooks first.

`nbdev_test` hands the notebooks to its workers in name order, so the slowest ones (`90_pipeline` ~23 s, `95_init`,
`90c_warm_kernels`) started last and one worker finished alone while the other core idled. Here they are handed out
longest first (by the seconds of the last recorded run, `benchmarks/results/notebook_durations.json`; a notebook it
does not list goes first, as it may be slow), so that the two workers end together.

    python tools/test_nbs.py [--n_workers 2] [--file_re REGEX] [--write]   # --write: record this run's seconds
"""
from __future__ import annotations
import argparse, json, os, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = ROOT / 'benchmarks' / 'results' / 'notebook_durations.json'


def slowest_first(names: list[str], seconds: dict[str, float]) -> list[str]:
    "`names` longest first by `seconds`; one not in `seconds` before all (it may be slow), ties in name order."
    return sorted(names, key=lambda n: (n in seconds, -seconds.get(n, 0.0), n))


def recorded_seconds(path: Path = DURATIONS) -> dict[str, float]:
    "The record's seconds per notebook; none (name order, said on stderr) when it is missing or unreadable."
    try: return dict(json.loads(path.read_text())['seconds'])
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"{path}: no notebook seconds to order by ({type(e).__name__}); the notebooks go in name order", file=sys.stderr)
        return {}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--n_workers', type=int, default=2)
    ap.add_argument('--file_re', default=None, help='test only the notebooks whose file name matches')
    ap.add_argument('--write', action='store_true', help=f'record each notebook\'s seconds in {DURATIONS.relative_to(ROOT)}')
    args = ap.parse_args(argv)
    from fastcore.parallel import parallel
    from fastcore.xtras import working_directory
    from nbdev.config import get_config
    from nbdev.doclinks import nbglob
    from nbdev.test import _keep_file, test_nb
    cfg = get_config()
    files = [f.absolute() for f in sorted(nbglob(file_re=args.file_re, as_path=True)) if _keep_file(f, '.notest')]
    if not files: print('No files were eligible for testing'); return 0
    by_name = {f.name: f for f in files}
    files = [by_name[n] for n in slowest_first(list(by_name), recorded_seconds())]
    with working_directory(cfg.nbs_path):
        results = parallel(test_nb, files, skip_flags=cfg.tst_flags.split(), force_flags=[], n_workers=args.n_workers,
                           basepath=cfg.config_path, pause=0.01, do_print=True)
    passed, seconds = zip(*results)
    if args.write:
        doc = {'what': "each library notebook's seconds in `make test-nbs` (tools/test_nbs.py --write), which orders the next run",
               'workers': args.n_workers, 'cpus': os.cpu_count(),
               'seconds': {f.name: round(t, 1) for f, t in sorted(zip(files, seconds), key=lambda x: -x[1])}}
        partial = DURATIONS.with_name(DURATIONS.name + '.partial')      # the record whole or not at all
        partial.write_text(json.dumps(doc, indent=1) + '\n'); os.replace(partial, DURATIONS)
    if all(passed): print('Success.'); return 0
    failed = '\n\t'.join(f.name for ok, f in zip(passed, files) if not ok)
    sys.stderr.write(f"\nnbdev Tests Failed On The Following Notebooks:\n{'=' * 50}\n\t{failed}\n")
    return 1


if __name__ == '__main__':
    sys.exit(main())
