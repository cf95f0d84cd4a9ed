"""Hashes of a run's per-prompt outcomes and its promotion decision, to show that a change kept behaviour.

    python tools/outcome_hashes.py outputs/tiny                 # print {file: sha256} as JSON
    python tools/outcome_hashes.py outputs/tiny --against OLD   # compare with another run folder, or with a JSON file of
                                                                # hashes such as results/tiny/outcome_hashes.json; exit 1 on a difference

Outcome files are hashed byte for byte. decision.json is hashed after removing what records *when* it ran
(the decision's and the seal's clock times and the results files' times), which differ on every run, and with
paths inside the run folder written relative to it, so two copies of a run in different folders compare. The run
folder is the one given and the one the decision was written in (its seal sits in `<run>/<stage>/`), so a run
copied away from where it ran compares too.
"""
from __future__ import annotations
import argparse, hashlib, json, sys
from pathlib import Path

CLOCK_KEYS = {'decided_at', 'sealed_at', 'time', 'time_ns', 'source', 'manifest'}

def _without_clocks(obj, run_dirs: tuple[str, ...]):
    if isinstance(obj, dict): return {k: _without_clocks(v, run_dirs) for k, v in obj.items() if k not in CLOCK_KEYS}
    if isinstance(obj, list): return [_without_clocks(v, run_dirs) for v in obj]
    for d in run_dirs:
        if isinstance(obj, str) and obj.startswith(d + '/'): return '<run>/' + obj[len(d) + 1:]
    return obj

def decision_sha256(path: Path, run_dir: Path) -> str:
    "sha256 of a decision.json's canonical JSON, clock times removed, paths relative to the run folder."
    raw = json.loads(Path(path).read_text())
    seal = (raw.get('seal') or {}).get('path')
    ran_in = (str(Path(seal).parent.parent),) if seal else ()      # where the run was when it decided
    data = _without_clocks(raw, (str(Path(run_dir).resolve()), *ran_in))
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(',', ':')).encode()).hexdigest()

def run_hashes(run_dir: str | Path) -> dict[str, str]:
    "{path relative to run_dir: sha256} of every per-prompt outcome file and every decision.json of a run."
    run_dir = Path(run_dir)
    out = {p.relative_to(run_dir).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
           for p in sorted(run_dir.rglob('*.outcomes.jsonl'))}
    out.update({p.relative_to(run_dir).as_posix(): decision_sha256(p, run_dir) for p in sorted(run_dir.rglob('decision.json'))})
    if not out: raise SystemExit(f"{run_dir}: no outcome files and no decision.json")
    return out

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('run_dir'); ap.add_argument('--against', help='another run folder, or a JSON file of hashes, to compare with')
    a = ap.parse_args(argv)
    new = run_hashes(a.run_dir)
    if not a.against:
        print(json.dumps(new, indent=1)); return 0
    old = json.loads(Path(a.against).read_text()) if Path(a.against).is_file() else run_hashes(a.against)
    diff = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    for k in diff: print(f"DIFFERS {k}: {old.get(k, 'absent')[:12]} -> {new.get(k, 'absent')[:12]}")
    print(f"{len(new) - len([k for k in diff if k in new])} of {len(new)} files identical; {len(diff)} differ")
    return 1 if diff else 0

if __name__ == '__main__':
    sys.exit(main())
