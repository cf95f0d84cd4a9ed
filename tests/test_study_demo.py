"""The demo's own result, pinned: on the finished run of `configs/tiny.yaml` (`make demo`), the repair clearly helps, the
grid's arms disagree with the champion, the double mix is two draws. A run small enough for `make test` moves a prompt
or two either way, so these properties are checked where they show, on the demo run: `make test-study` runs the demo
(a no-op when it is current) and then these tests, and CI runs it after `make test`. They fail, never skip, when the
run is missing or stale, so a regression to all-ties cannot pass unseen."""
import csv, json
import itertools
import re
from pathlib import Path

import pytest

from rsi_repro import pipeline as pl
from rsi_repro.config import load_profile
from rsi_repro.layout import EVAL_STAGES, outcomes_path
from rsi_repro.stats import load_outcomes
from rsi_repro.run_view import ladder, rates
from rsi_repro.summary import grid_discordance

pytestmark = pytest.mark.study
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope='module')
def demo():
    "The demo's profile, its run finished and current: every stage would be skipped."
    prof = load_profile(ROOT / 'configs' / 'tiny.yaml')
    steps = pl.plan(prof)
    stale = [f"{s.stage} ({s.action}: {s.reasons[0][:80] if s.reasons else ''})" for s in steps if s.action != 'skip']
    assert not stale, f"{prof.run_dir} is not a finished, current demo run; run `make demo` first (`make test-study` does). Would run: {stale}"
    return prof


def test_the_repair_clearly_helps_on_h6(demo):
    "H6 rises from base to repair; repair against its parent: at least 15 discordant prompts, exact sign p < 0.05, more fixed than lost."
    lad = ladder(demo, instruments=['h6']).set_index('checkpoint')
    step = lad.loc['repair']
    assert step.fixed + step.lost >= 15 and step.p < 0.05 and step.fixed > step.lost, step.to_dict()
    r = rates(demo, ['h6'])['h6']
    assert r['repair'] > r['base'], r.to_dict()


def test_stages_move_verdicts_in_both_directions(demo):
    "Some step fixes more prompts than it loses and some loses more than it fixes: stages change which prompts pass."
    lad = ladder(demo, instruments=['h6'])
    assert (lad.fixed > lad.lost).any() and (lad.lost > lad.fixed).any(), lad[['step', 'fixed', 'lost']]


def test_the_grid_disagrees_with_the_champion_and_no_two_arms_are_alike(demo):
    g = grid_discordance(demo.run_dir, 'h6')
    assert (g.discordant > 0).sum() * 2 >= len(g) and len(g) >= 2, g[['cell', 'fixed', 'lost']]
    arms = list(g.cell)
    def outcomes(ck):
        return {inst: load_outcomes(outcomes_path(demo.run_dir, ck, inst, tuple(EVAL_STAGES)), ck)['passed'].to_dict()
                for inst in ('h6', 'probe2')}
    seen = {a: outcomes(a) for a in arms}
    for a, b in itertools.combinations(arms, 2):
        assert seen[a] != seen[b], f"arms {a} and {b} pass and fail the same prompts on H6 and probe2"


def test_the_double_mix_is_a_second_draw_of_about_twice_the_rows(demo):
    rows = list(csv.DictReader(open(demo.run_dir / 'rounds' / 'arms.csv')))
    single = {(r['dataset_sha256'], int(r['examples_mix'])) for r in rows if r['mix'] == 'single'}
    double = {(r['dataset_sha256'], int(r['examples_mix'])) for r in rows if r['mix'] == 'double'}
    assert len(single) == 1 and len(double) == 1, (single, double)          # each mix is one file, shared by its arms
    (s_sha, s_n), (d_sha, d_n) = single.pop(), double.pop()
    assert s_sha != d_sha and 1.6 <= d_n / s_n <= 2.4, (s_n, d_n)


def test_math_is_explained_where_it_is_zero(demo):
    "Math at 0.0 for every checkpoint is allowed only with the README saying why."
    math = rates(demo, ['math'])['math']
    if (math == 0).all():
        readme = re.sub(r'<!-- /?fig[^>]*-->', '', (ROOT / 'README.md').read_text())      # the figures as a reader sees them
        assert 'Math is 0.0 for every checkpoint, and must be at this scale' in readme


def test_the_seven_checks_are_read_and_shown_beside_the_rule(demo):
    "The decide stage reads all seven of the card's guard checks on the demo and the front page shows them with the guard's verdict."
    import json
    guard = json.loads((demo.run_dir / 'decide' / 'guard.json').read_text())
    assert [c['check'] for c in guard['checks']] == ['math', 'code', 'termination and tool leaks', 'open chat', 'multi-turn',
                                                    'wide battery', 'safety']
    assert all(c['verdict'] != 'not read' and c['n'] > 0 for c in guard['checks']), guard['checks']
    assert guard['verdict'] == ('passed: 7 checks found no regression' if all(c['verdict'] == 'no regression' for c in guard['checks'])
                                else 'regression: ' + ', '.join(c['check'] for c in guard['checks'] if c['verdict'] == 'regression'))
    front = (demo.run_dir / 'report' / 'site' / 'index.html').read_text()
    assert "<table class='guard'>" in front and f"<b>{guard['verdict']}</b>" in front


def test_the_one_se_rule_weighs_the_grid_by_regression_profile_and_the_front_page_shows_it(demo):
    """The grid stage applies the card's preference within one SE (the profile switches it on): the champion, whose guard
    was read on every check, against arms read on the headline instruments alone; the front page shows the verdict and
    every candidate, with captions on the reads beside the verdict."""
    import html
    v = json.loads((demo.run_dir / 'grid' / 'one_se_h6.json').read_text())
    grid = {r['cell']: r for r in csv.DictReader(open(demo.run_dir / 'grid' / 'grid_h6.csv'))}
    cands = {c['candidate']: c for c in v['candidates']}
    from rsi_repro.layout import parent_of
    assert set(cands) == {v['champion'], *grid} and v['reference'] == parent_of(demo, v['champion'])   # the stage-3 soup
    assert cands[v['champion']]['regression_profile'].startswith('7 of 7 checks read')        # the eval stage read all seven
    assert all(cands[a]['regression_profile'] == 'not measured (0 of 7 checks read)' for a in grid)   # eval_arms: h6, probe2
    best = max(cands.values(), key=lambda c: c['delta'])
    assert v['best'] == best['candidate'] and v['tied'] == [c['candidate'] for c in v['candidates'] if c['within']]
    assert all(best['delta'] - float(grid[a]['delta']) <= v['se'] + 1e-12 for a in v['tied'] if a in grid)
    if v['champion'] in v['tied']: assert v['chosen'] == v['champion']        # within one SE: the characterised candidate
    else: assert v['chosen'] == v['best']                                        # beyond: no candidate as well profiled
    front = (demo.run_dir / 'report' / 'site' / 'index.html').read_text()
    assert "id=one-se-h6" in front and f"<b>{html.escape(v['why'])}</b>" in front
    for title in ('The pooled read', 'The standard error beside each delta', 'Discordant prompts by failure reason',
                  "The grid&#x27;s prior", 'Same-recipe arms: the seed spread'):
        assert f"<caption><b>{title}</b>." in front, title


def test_stage_4_starts_from_the_stage_3_soup_and_is_read_through_it(demo):
    """As in the card's lineage, the champion warm-starts from the plain parameter average of the stage-3 seeds: the
    ladder reads repair -> soup -> champion, the front page reads the champion against the soup and against each adapter
    the soup averaged, and the soups stage states the card's two soup verdicts as this run measured them."""
    import html
    import pandas as pd
    from rsi_repro.layout import arm_adapter, parent_of, resolve_checkpoint, rounds_dir
    from rsi_repro.read_stages import through_soup
    champ = demo.rounds.champion_name
    soup = parent_of(demo, champ)
    assert soup == 'soup_linear' and parent_of(demo, soup) == 'repair'
    evidence = json.loads((arm_adapter(rounds_dir(demo), champ) / 'training_evidence.json').read_text())
    assert Path(evidence['warm_start']).resolve() == resolve_checkpoint(demo, soup).resolve(), evidence['warm_start']
    lad = ladder(demo, instruments=['h6']).set_index('checkpoint')
    assert list(lad.index[-2:]) == [soup, champ], list(lad.index)
    reads = through_soup(demo)
    assert set(reads['checkpoint']) == {champ} and set(reads['against']) == {soup, 'repair-s11', 'repair-s12'}
    assert (reads['n'] > 0).all() and set(reads['instrument']) == set(demo.soups.instruments)
    front = (demo.run_dir / 'report' / 'site' / 'index.html').read_text()
    assert 'id=through-soup' in front and all(f"<td>{html.escape(a)}</td>" in front for a in reads['against'])
    verdicts = pd.read_csv(demo.run_dir / 'soups' / 'card_verdicts.csv')
    assert set(verdicts['soup']) == {f"soup_{m}" for m in demo.soups.methods}
    assert verdicts['verdict'].str.contains('degenerate').all() and 'soups/card_verdicts.csv' in front
