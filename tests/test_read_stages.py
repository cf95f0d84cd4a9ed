"The pair-read stage's flow: a person's read waits for labels, resumes, then scores; the scripted rule never overwrites a person."
from pathlib import Path

import pytest
import yaml

from rsi_repro import pair_read as pr
from rsi_repro.config import ReadSettings, load_profile
from rsi_repro.read_stages import run_read, who_read

ROOT = Path(__file__).resolve().parents[1]


def rows(salt, passed):
    return [{'instrument': 'open_chat', 'id': f"q{i}", 'family': 'fgh'[i % 3], 'prompt': f"Prompt {i}",
             'response': f"{salt} answer {i}." * (1 + i % 2), 'passed': p} for i, p in enumerate(passed)]


def test_person_read_waits_resumes_and_scores(tmp_path):
    first, second = rows('one', [True] * 9), rows('two', [True] * 5 + [False] * 4)
    s = ReadSettings(n=6, annotator='person')
    r = run_read(first, second, ('parent', 'child'), s, tmp_path)
    assert r['status'] == 'awaiting labels' and r['n'] == 6 and not (tmp_path / 'pair_read.summary.json').exists()
    ann = pr.Annotator(tmp_path / 'sheet.csv', annotator='reader')
    for label in ('A', 'B', 'tie'): ann.buttons[label].click()
    r = run_read(first, second, ('parent', 'child'), s, tmp_path)               # the stage reruns: labels kept
    assert r['status'] == 'awaiting labels' and r['labelled'] == 3 and r['resumed']
    again = pr.Annotator(tmp_path / 'sheet.csv', annotator='reader')
    for label in ('both_bad', 'A', 'A'): again.buttons[label].click()
    r = run_read(first, second, ('parent', 'child'), s, tmp_path)
    assert r['status'] == 'scored' and r['summary']['annotators'] == ['reader']
    assert not who_read(r).startswith('SCRIPTED')
    assert (tmp_path / 'pair_read.summary.json').exists()
    with pytest.raises(ValueError, match='labelled by a person'):
        run_read(first, second, ('parent', 'child'), ReadSettings(n=6, annotator='scripted'), tmp_path)


def test_scripted_read_is_labelled_as_such_everywhere(tmp_path):
    r = run_read(rows('one', [True] * 9), rows('two', [False] * 9), ('parent', 'child'), ReadSettings(n=4, annotator='scripted'), tmp_path)
    assert r['status'] == 'scored' and r['n'] == 9                              # every discordant prompt, above n
    assert {x['annotator'] for x in pr.read_sheet(tmp_path / 'sheet.csv')} == {pr.SCRIPTED}
    assert r['summary']['annotators'] == [pr.SCRIPTED] and who_read(r).startswith('SCRIPTED READ')
    assert all(x['annotator'] == pr.SCRIPTED for x in r['scored'])


def test_tiny_profile_runs_both_stages_before_the_report():
    prof = load_profile(ROOT / 'configs' / 'tiny.yaml')
    names = [s.name for s in prof.stages]
    assert {'pair_read', 'soups'} <= set(prof.stage('report').needs)
    assert names.index('pair_read') > names.index('eval') and names.index('soups') > names.index('repair')
    assert prof.pair_read.annotator == 'scripted' and prof.soups.stage == 'repair'
    real = load_profile(ROOT / 'configs' / 'nemotron.yaml', check_files=False)
    assert real.pair_read.annotator == 'person' and real.pair_read.n == 40 and real.pair_read.seed == 20261005
