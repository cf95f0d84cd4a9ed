"""Where `make test`'s pytest time goes: a junit XML report (pytest --junitxml) summed per test file, slowest first.

    OMP_NUM_THREADS=1 pytest -q -n 2 -m "not gpu and not study" --junitxml=/tmp/junit.xml tests   # as make test runs it
    python tools/test_durations.py /tmp/junit.xml --out benchmarks/results/pytest_durations.json

Each file's seconds are its tests' own (a module fixture's set-up counts in its first test); in two workers the files
add up to about twice the suite's wall time (`suite_seconds`), each file slower than alone where the other worker
shares the two cores."""
from __future__ import annotations
import argparse, json, platform, os, subprocess
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def durations(junit: str | Path) -> dict:
    "{'total_seconds', 'tests', 'files': [{file, tests, seconds, slowest, slowest_seconds}, ...] slowest first}."
    root = ET.parse(junit).getroot()
    suite = root if root.tag == 'testsuite' else root.find('testsuite')
    per_file, total, count = defaultdict(list), 0.0, 0
    for case in suite.iter('testcase'):
        f = case.get('classname', '').split('.')[-1] or '?'     # 'tests.test_train' (a test class would add a part: none here)
        per_file[f].append((case.get('name'), float(case.get('time', 0))))
        total += float(case.get('time', 0)); count += 1
    files = [{'file': f"tests/{f}.py", 'tests': len(c), 'seconds': round(sum(t for _, t in c), 1),
              'slowest': max(c, key=lambda x: x[1])[0], 'slowest_seconds': round(max(t for _, t in c), 1)} for f, c in per_file.items()]
    return {'suite_seconds': round(float(suite.get('time', total)), 1), 'tests': count, 'tests_seconds': round(total, 1),
            'files': sorted(files, key=lambda r: -r['seconds'])}


if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('junit'); ap.add_argument('--out')
    a = ap.parse_args()
    d = durations(a.junit)
    commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()
    d = {'what': 'OMP_NUM_THREADS=1 pytest -q -n 2 -m "not gpu and not study" tests (make test: two pytest-xdist workers), '
                 'per test file (tools/test_durations.py over its junit XML); suite_seconds is the wall time',
         'commit': commit, 'cpus': os.cpu_count(), 'python': platform.python_version(), **d}
    for r in d['files'][:25]: print(f"{r['seconds']:8.1f} s  {r['tests']:3d} tests  {r['file']}  (slowest: {r['slowest']}, {r['slowest_seconds']} s)")
    print(f"{d['tests_seconds']:8.1f} s in {d['tests']} tests; the suite {d['suite_seconds']} s")
    if a.out:       # the one-process reference the README quotes beside it stays
        old = json.loads(Path(a.out).read_text()) if Path(a.out).exists() else {}
        d.update({k: old[k] for k in ('one_after_another',) if k in old})
        Path(a.out).write_text(json.dumps(d, indent=1) + '\n')
