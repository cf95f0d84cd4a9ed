"""`make test` runs pytest in two pytest-xdist workers. A test file's module fixtures build runs in fixed folders under
outputs/, so a file must never be split between workers, and the files that read conftest's `finished_run` (one
session run in one folder) must share one worker: conftest.py's scheduler hands out whole scopes."""
import re, shutil, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip('xdist')


def test_a_file_and_the_shared_runs_files_each_run_in_one_worker(tmp_path):
    tests = tmp_path / 'tests'; tests.mkdir()
    shutil.copy(ROOT / 'tests' / 'conftest.py', tests / 'conftest.py')
    for name in ('test_pipeline', 'test_run_trust', 'test_pipeline_folder', 'test_a', 'test_b', 'test_c'):
        (tests / f'{name}.py').write_text(''.join(f"def test_{i}(): pass\n" for i in range(6)))
    out = subprocess.run([sys.executable, '-m', 'pytest', '-n', '2', '-v', '-p', 'no:cacheprovider', 'tests'], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300).stdout
    ran = re.findall(r'^\[(gw\d)\] .*?PASSED (tests/\w+)\.py::', out, re.M)
    assert len(ran) == 36, out[-2000:]
    worker = {}
    for gw, file in ran: worker.setdefault(file, set()).add(gw)
    assert all(len(w) == 1 for w in worker.values()), worker                      # no file split
    assert len({*worker['tests/test_pipeline'], *worker['tests/test_run_trust'], *worker['tests/test_pipeline_folder']}) == 1
    assert len({w for ws in worker.values() for w in ws}) == 2, worker              # and both workers had work


def test_the_notebooks_are_handed_out_slowest_first_and_a_new_one_before_all():
    """`make test-nbs` (tools/test_nbs.py) gives its two workers the notebooks longest first by the last recorded run, so
    that they end together; a notebook the record does not know may be slow, so it goes first."""
    sys.path.insert(0, str(ROOT / 'tools'))
    try: from test_nbs import recorded_seconds, slowest_first
    finally: sys.path.remove(str(ROOT / 'tools'))
    seconds = {'00_config.ipynb': 0.3, '90_pipeline.ipynb': 17.2, '03_generate.ipynb': 16.0, '24_paired.ipynb': 0.3}
    names = sorted([*seconds, '99_new.ipynb'])
    assert slowest_first(names, seconds) == ['99_new.ipynb', '90_pipeline.ipynb', '03_generate.ipynb', '00_config.ipynb', '24_paired.ipynb']
    assert recorded_seconds(ROOT / 'no-such-record.json') == {}     # no record: name order (said on stderr), not a failure
    recorded = recorded_seconds()                          # the committed record covers the library's notebooks
    assert {p.name for p in (ROOT / 'nbs').glob('[0-9]*.ipynb')} <= set(recorded), "tools/test_nbs.py --write to record them"
