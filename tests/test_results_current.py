"""The committed demo results are what this code gives. `results/tiny/` (which the README's demo figures are written from)
records the commit and the code that made it (`made_by.json`), and CI rebuilds the demo on every push (`make
test-study`): here the rebuilt run is compared with the committed files, so a change to the library, the notebooks or
the profile that moves any per-prompt outcome, the decision or a table the README quotes fails, naming each file, until
`make results` is rerun and committed. A change that moves none of them passes without any declaration: what is
checked is the results, not the code's hashes."""
import csv, io, json, subprocess, sys
from pathlib import Path

import pytest

from rsi_repro.config import load_profile

pytestmark = pytest.mark.study
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / 'results' / 'tiny'
# results/tiny's tables that hold no clock time or machine figure: each must be the rebuilt run's, row for row
TABLES = {'grid/grid_h6.csv': 'grid_h6.csv', 'grid/seed_spread_h6.csv': 'seed_spread_h6.csv', 'report/rates.csv': 'rates.csv',
          'decide/failure_reasons.csv': 'failure_reasons.csv', 'eval/paired_older.csv': 'paired_older.csv',
          'soups/card_verdicts.csv': 'soup_verdicts.csv'}


@pytest.fixture(scope='module')
def run_dir():
    "The demo run, compared only where its arithmetic is the one that made results/tiny (else skipped, saying what differs)."
    sys.path.insert(0, str(ROOT / 'tools'))
    from results_tiny import arithmetic
    d = load_profile(ROOT / 'configs' / 'tiny.yaml').run_dir
    assert (d / 'report' / 'manifest.json').exists(), f"{d}: no finished demo run; run `make demo` first (`make test-study` does)"
    made = json.loads((RESULTS / 'made_by.json').read_text()).get('arithmetic')
    here = arithmetic()
    if made != here:   # another instruction set, core count or package version moves the last bits of training
        pytest.skip(f"this machine's arithmetic differs from the one that made results/tiny "
                    f"({', '.join(k for k in here if (made or {}).get(k) != here[k])}): the demo need not be bit for bit the same here")
    return d


def test_every_outcome_and_decision_is_the_committed_ones(run_dir):
    done = subprocess.run([sys.executable, 'tools/outcome_hashes.py', str(run_dir), '--against', str(RESULTS / 'outcome_hashes.json')],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, (f"results/tiny is not what this code gives (the demo run in {run_dir} differs); rerun "
                                  f"`make results` and commit it:\n{done.stdout[-3000:]}")


@pytest.mark.parametrize('made, committed', sorted(TABLES.items()))
def test_each_table_the_readme_quotes_is_the_rebuilt_runs(run_dir, made, committed):
    rows = lambda text: list(csv.reader(io.StringIO(text)))
    assert rows((RESULTS / committed).read_text()) == rows((run_dir / made).read_text()), (
        f"results/tiny/{committed} is not {run_dir.name}/{made} of this code's demo run: rerun `make results` and commit it")


def test_the_committed_results_name_the_code_and_arithmetic_that_made_them():
    made_by = json.loads((RESULTS / 'made_by.json').read_text())
    assert len(made_by['commit']) == 40 and all(len(made_by[k]) == 64 for k in ('library_sha256', 'notebooks_sha256', 'profile_sha256'))
    assert set(made_by['arithmetic']) == {'cpu_flags_sha256', 'cpus', 'machine', 'packages'}
