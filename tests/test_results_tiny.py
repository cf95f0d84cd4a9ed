"""results/tiny/ holds what the README's demo section quotes, copied from a demo run by `make results`
(tools/results_tiny.py). Every figure between the README's results markers is written from its own field of one of
those files (tools/doc_figures.py; none typed by hand), the sentences about math and IFBench have their rates behind them, the files come from the
current tiny profile, and none holds a path of the machine that built the run."""
import csv, hashlib, json, math, re, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / 'results' / 'tiny'
BEGIN, END = '<!-- figures from results/tiny: begin -->', '<!-- figures from results/tiny: end -->'
FIGURE = re.compile(r'(?<![\w.\-/−+])[-+−]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+−]?\d+)?(?![\w.]?\w)')
sys.path.insert(0, str(ROOT / 'tools'))
from results_tiny import FILES, HASHES, MADE_BY, absolute_paths      # noqa: E402
import doc_figures                                                      # noqa: E402


MARKED = re.compile(r'<!-- fig (\S+?):\S+.*?-->.*?<!-- /fig -->')
PROSE = {'30'}          # the method's constants written in words' place ("30-token shingles"), not results


def readme_block() -> str:
    text = (ROOT / 'README.md').read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, f"README.md: expected one {BEGIN} ... {END} block"
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)]


def unmarked_figures(block: str) -> list[str]:
    "The figures of a block that are not written from a field (outside every `<!-- fig ... -->` mark)."
    return [f for f in FIGURE.findall(MARKED.sub(' ', block)) if f not in PROSE]


def test_every_figure_the_readme_quotes_is_written_from_a_field_of_results_tiny():
    block = readme_block()
    files = MARKED.findall(block)
    assert len(files) > 100 and all(f.startswith('results/tiny/') for f in files), files[:5]
    assert not (loose := unmarked_figures(block)), f"README.md's demo section types figures by hand: {loose}"
    bad = [p for p in doc_figures.problems(docs=('README.md',)) if 'results/tiny/' in p]
    assert not bad, bad


def test_an_unmarked_figure_is_found():
    mark = '<!-- fig results/tiny/judgement.json:pooled.p .3g -->2.74e-05<!-- /fig -->'
    assert unmarked_figures(f'fixes 25 prompts (p = {mark}) in 30-token shingles, v6141, 3,443,136 rows, −0.029') == ['25', '3,443,136', '−0.029']


def test_math_and_ifbench_sentences_have_their_rates_behind_them():
    rates = list(csv.DictReader((RESULTS / 'rates.csv').read_text().splitlines()))
    math_rates = [float(r['math']) for r in rates]
    ifbench = [float(r['ifbench']) for r in rates]
    readme = re.sub(r'<!-- /?fig[^>]*-->', '', (ROOT / 'README.md').read_text())
    assert 'Math is 0.0 for every checkpoint' in readme and math_rates and all(r == 0.0 for r in math_rates), math_rates
    assert 'between 0.10 and 0.17' in readme and round(min(ifbench), 2) >= 0.10 and round(max(ifbench), 2) <= 0.17, ifbench


def test_results_come_from_the_current_tiny_profile_and_hold_no_machine_paths():
    summary = json.loads((RESULTS / 'summary.json').read_text())
    assert sorted(p.name for p in RESULTS.iterdir()) == sorted([*FILES.values(), HASHES, MADE_BY])
    assert summary['provenance']['profile_sha256'] == hashlib.sha256((ROOT / 'configs' / 'tiny.yaml').read_bytes()).hexdigest(), \
        "results/tiny/ is stale: it was not built with the current configs/tiny.yaml (run `make results`)"
    for f in RESULTS.iterdir():
        assert not absolute_paths(f.read_text()), (f.name, absolute_paths(f.read_text())[:3])
    assert absolute_paths('{"path": "/home/me/rsi/outputs/tiny/eval/x.jsonl"}') == ['/home/me/rsi/outputs/tiny/eval/x.jsonl']
