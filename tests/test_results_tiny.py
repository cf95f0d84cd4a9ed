"""results/tiny/ holds what the README's demo section quotes, copied from a demo run by `make results`
(tools/results_tiny.py). Every figure between the README's results markers is in one of those files (to the digits
it is printed with), the sentences about math and IFBench have their rates behind them, the files come from the
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


def printed(token: str) -> tuple[float, float]:
    "(value, tolerance) of a number as printed: half a unit in its last printed place."
    t = token.replace('−', '-').replace(',', '')
    mant, _, exp = t.partition('e')
    digits = len(mant.split('.')[1]) if '.' in mant else 0
    scale = 10 ** int(exp) if exp else 1
    return float(t), 0.5 * 10 ** -digits * scale


def _numbers(obj, out):
    if isinstance(obj, bool): return
    if isinstance(obj, (int, float)): out.append(float(obj))
    elif isinstance(obj, str):
        try: out.append(float(obj))
        except ValueError: out.extend(float(x.replace('−', '-')) for x in re.findall(r'[-+−]?\d+(?:\.\d+)?(?:e[-+]?\d+)?', obj))
    elif isinstance(obj, dict): [_numbers(v, out) for v in obj.values()]
    elif isinstance(obj, list): [_numbers(v, out) for v in obj]


def result_numbers() -> list[float]:
    "Every number in results/tiny: JSON values, CSV cells, Markdown figures."
    out = []
    for f in sorted(RESULTS.iterdir()):
        text = f.read_text()
        if f.suffix == '.json': _numbers(json.loads(text), out)
        elif f.suffix == '.csv': [_numbers(cell, out) for row in csv.reader(text.splitlines()) for cell in row]
        else: _numbers(text, out)
    return [x for x in out if not math.isnan(x)]


def readme_figures() -> list[str]:
    text = (ROOT / 'README.md').read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, f"README.md: expected one {BEGIN} ... {END} block"
    block = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
    return FIGURE.findall(block)


def missing(figures: list[str], have: list[float]) -> list[str]:
    "The printed figures no number in `have` rounds to (the sign aside: a table prints a loss as -0.029 or as 0.029 lost)."
    return [f for f in figures if not any(abs(abs(v) - abs(printed(f)[0])) <= printed(f)[1] + 1e-12 for v in have)]


def test_every_figure_the_readme_quotes_is_in_results_tiny():
    figures = readme_figures()
    assert len(figures) > 50, figures
    assert not (gone := missing(figures, result_numbers())), f"README.md quotes figures that no file in results/tiny holds: {gone}"


def test_the_check_fails_on_a_figure_that_is_not_there():
    have = [0.48333, -0.0291, 2.98e-08, 25, 0.1, 1.0]
    assert missing(['0.483', '−0.029', '3e-8', '2.98e-08', '25', '0.10', '1'], have) == []
    assert missing(['0.484', '0.04', '3e-7', '24', '0.123456'], have) == ['0.484', '0.04', '3e-7', '24', '0.123456']
    assert FIGURE.findall('H6 from 0.400 at the base to 0.483 (p = 3e-8, v6141, 3 / 25, −0.029, 3,443,136)') == \
        ['0.400', '0.483', '3e-8', '3', '25', '−0.029', '3,443,136']
    assert printed('0.10') == (0.1, pytest.approx(0.005)) and printed('2.74e-05')[1] == pytest.approx(5e-8)


def test_math_and_ifbench_sentences_have_their_rates_behind_them():
    rates = list(csv.DictReader((RESULTS / 'rates.csv').read_text().splitlines()))
    math_rates = [float(r['math']) for r in rates]
    ifbench = [float(r['ifbench']) for r in rates]
    readme = (ROOT / 'README.md').read_text()
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
