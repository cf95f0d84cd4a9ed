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
    """The demo run, and what of its arithmetic differs from the one that made results/tiny (instruction set, core count,
    package versions: they move the last bits of training). It is compared everywhere: a difference fails where the
    arithmetic is results/tiny's, and is skipped, saying what differs, where it is not."""
    sys.path.insert(0, str(ROOT / 'tools'))
    from results_tiny import arithmetic
    d = load_profile(ROOT / 'configs' / 'tiny.yaml').run_dir
    assert (d / 'report' / 'manifest.json').exists(), f"{d}: no finished demo run; run `make demo` first (`make test-study` does)"
    made, here = json.loads((RESULTS / 'made_by.json').read_text()).get('arithmetic') or {}, arithmetic()
    return d, [k for k in here if made.get(k) != here[k]]


def _differs(arithmetic_differs: list[str], said: str):
    "A difference from results/tiny: a failure on its own arithmetic, a skip naming what differs on another."
    if arithmetic_differs:
        pytest.skip(f"the demo run differs from results/tiny on a machine whose arithmetic differs from the one that made it "
                    f"({', '.join(arithmetic_differs)}): it need not be bit for bit the same here")
    pytest.fail(said)


def test_every_outcome_and_decision_is_the_committed_ones(run_dir):
    d, differs = run_dir
    done = subprocess.run([sys.executable, 'tools/outcome_hashes.py', str(d), '--against', str(RESULTS / 'outcome_hashes.json')],
                          cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        _differs(differs, f"results/tiny is not what this code gives (the demo run in {d} differs); rerun "
                          f"`make results` and commit it:\n{done.stdout[-3000:]}")


@pytest.mark.parametrize('made, committed', sorted(TABLES.items()))
def test_each_table_the_readme_quotes_is_the_rebuilt_runs(run_dir, made, committed):
    d, differs = run_dir
    rows = lambda text: list(csv.reader(io.StringIO(text)))
    if rows((RESULTS / committed).read_text()) != rows((d / made).read_text()):
        _differs(differs, f"results/tiny/{committed} is not {d.name}/{made} of this code's demo run: rerun `make results` and commit it")


def test_the_committed_results_name_the_code_and_arithmetic_that_made_them():
    made_by = json.loads((RESULTS / 'made_by.json').read_text())
    assert len(made_by['commit']) == 40 and all(len(made_by[k]) == 64 for k in ('library_sha256', 'notebooks_sha256', 'profile_sha256'))
    assert set(made_by['arithmetic']) == {'cpu_flags_sha256', 'cpus', 'machine', 'packages'}
