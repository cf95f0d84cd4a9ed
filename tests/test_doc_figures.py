"""Figures in the README and benchmarks/RESULTS.md are written from their result files (tools/doc_figures.py, between
`<!-- fig FILE:FIELD FORMAT -->` marks) and checked against them: an edit to either side, without the other, is named."""
import json, re
import pytest, shutil, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'tools'))
import doc_figures as D      # noqa: E402


def test_every_marked_figure_is_what_its_file_gives():
    assert D.problems() == []
    assert sum(len(D.figures(d)) for d in D.DOCS) >= 30


def _copy(tmp_path: Path) -> Path:
    for d in D.DOCS: (tmp_path / d).parent.mkdir(parents=True, exist_ok=True); shutil.copy(ROOT / d, tmp_path / d)
    for f in {f.file for d in D.DOCS for f in D.figures(d)}:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True); shutil.copy(ROOT / f, tmp_path / f)
    return tmp_path


def test_a_figure_edited_in_the_document_is_named_with_its_sentence(tmp_path):
    root = _copy(tmp_path)
    fig = next(f for f in D.figures('benchmarks/RESULTS.md', root) if f.field == 'speedup')
    doc = root / fig.doc
    lines = doc.read_text().splitlines(keepends=True)
    lines[fig.line - 1] = lines[fig.line - 1].replace(f"-->{fig.shown}<!-- /fig -->", "-->9.99<!-- /fig -->", 1)
    doc.write_text(''.join(lines))
    bad = D.problems(root)
    assert len(bad) == 1 and bad[0].startswith(f"benchmarks/RESULTS.md:{fig.line}: shows '9.99', {fig.file}:speedup gives '{fig.shown}'")
    assert 'Speed-up **9.99x**' in bad[0]                       # the sentence, as a reader sees it
    D.write(root); assert D.problems(root) == []               # written back from the file


def test_a_result_file_changed_without_the_documents_is_named(tmp_path):
    root = _copy(tmp_path)
    f = root / 'benchmarks/results/checker_python3.11.json'
    data = json.loads(f.read_text()); data['reference_responses_per_s'] = 1.5; f.write_text(json.dumps(data))
    bad = D.problems(root)
    assert bad and all('checker_python3.11.json:reference_responses_per_s gives \'1.5\'' in b for b in bad), bad
    del data['speedup']; f.write_text(json.dumps(data))
    assert any("no field 'speedup'" in b for b in D.problems(root))


def test_a_field_path_reads_items_keys_rows_and_runs_of_items():
    data = {'stages': [{'stage': 'serve', 'seconds': 40.0}, {'stage': 'sft', 'seconds': 2.5}, {'stage': 'eval', 'seconds': 1.0}],
            'a.b': {'c': 7}}
    assert D.value_at(data, 'stages[1].seconds') == 2.5 and D.value_at(data, '["a.b"].c') == 7
    assert D.value_at(data, 'stages[stage=eval].seconds') == 1.0 and D.value_at(data, 'len(stages)') == 3
    assert D.value_at(data, 'sum(stages[1:][*].seconds)') == 3.5                # every stage after the first
    assert D.value_at(data, 'stages[:1][*].stage') == ['serve'] and D.value_at(data, 'max(stages[:2][*].seconds)') == 40.0
    with pytest.raises(D.FigureError, match="no field"): D.value_at(data, '["a.b"][1:]')     # a run of items of a mapping


@pytest.mark.parametrize('args', [(), ('--gpus', '64'), ('--gpus', '1,8,32,64')])
def test_the_readmes_estimate_blocks_are_what_the_command_prints(args):
    "The README quotes `rsi-repro estimate [--gpus ...] configs/nemotron.yaml` whole; each quote is what the command prints today."
    import subprocess
    head = f"```text\n$ rsi-repro estimate {' '.join([*args, 'configs/nemotron.yaml'])}\n"
    readme = (ROOT / 'README.md').read_text()
    start = readme.index(head) + len(head)
    quoted = readme[start:readme.index("```", start)]
    out = subprocess.run([sys.executable, '-m', 'rsi_repro.cli', 'estimate', *args, 'configs/nemotron.yaml'], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert quoted == out, f"README's block for estimate {' '.join(args)} is not what the command prints: paste the command's output there"


def test_the_estimate_summary_the_readme_quotes_is_what_the_estimate_gives_today():
    "benchmarks/results/estimate_nemotron.json (the README's prose about the price) is rebuilt from `rsi-repro estimate` and compared."
    done = subprocess.run([sys.executable, 'tools/estimate_summary.py', '--check'], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_readmes_word_on_make_tests_ten_minutes_is_what_its_file_gives():
    "The README says `make test` is under or over its ten minutes in words the figures beside it must bear out."
    readme, seconds = (ROOT / 'README.md').read_text(), json.loads((ROOT / 'benchmarks/results/test_time.json').read_text())['test_seconds']
    said = re.search(r"test_time\.json:setup_seconds d -->\d+<!-- /fig --> s of set-up: (under|over) the ten minutes", readme)
    assert said, "the README's sentence on make test's time is gone or reworded: say here what it claims"
    assert (said.group(1) == 'under') == (seconds <= 600), f"the README says {said.group(1)}; test_time.json says {seconds} s"
