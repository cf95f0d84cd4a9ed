"""The whole study through the runner, on a smaller run derived from the tiny profile (`extends`):
every stage executes, a second run skips every stage, --only/--force/--arm behave, the site is built."""
import hashlib, json, shutil, subprocess, sys, time
from pathlib import Path

import pytest

from rsi_repro.config import load_profile
from rsi_repro.pipeline import read_manifest, run
from rsi_repro.io import sha256_file

ROOT = Path(__file__).resolve().parents[1]
# The smaller run of the tiny profile, run once per session: `small_profile` and `finished_run` live in conftest.py,
# where tests/test_run_trust.py reads copies of the same finished run.
from conftest import SMALL, SMALL_RUN as RUN


@pytest.fixture(scope='module')
def profile_path(small_profile): return small_profile


@pytest.fixture(scope='module')
def first_run(finished_run): return finished_run


def test_every_stage_runs_and_leaves_notebook_and_manifest(profile_path, first_run):
    prof = load_profile(profile_path)
    assert [r.status for r in first_run] == ['ran'] * len(prof.stages)
    for s in prof.stages:
        m = read_manifest(prof.run_dir / s.name)
        assert m and (prof.run_dir / s.name / m['executed_notebook']).exists()
        for rel, digest in m['outputs'].items():                      # the manifest hashes what is on disk
            assert sha256_file(prof.run_dir / s.name / rel) == digest
        assert set(m['versions']) >= {'python', 'torch', 'transformers', 'peft', 'trl', 'papermill'}
    times = [json.loads(l) for l in (prof.run_dir / 'run_times.jsonl').read_text().splitlines()]
    first = [t for t in times if t['run_began'] == times[0]['run_began']]       # the run from scratch: every stage, timed
    assert [(t['stage'], t['status']) for t in first] == [('base', 'ready')] + [(s.name, 'ran') for s in prof.stages]
    assert all(t['seconds'] > 0 for t in first[1:])


def test_adapters_evidence_names_the_file_it_was_trained_on(profile_path, first_run):
    prof = load_profile(profile_path)
    for ad in [prof.run_dir / 'sft/adapter', prof.run_dir / 'dpo/adapter', prof.run_dir / 'repair/adapter',
               prof.run_dir / 'rounds/v6141/adapter', prof.run_dir / 'rounds/v741/adapter']:
        ev = json.loads((ad / 'training_evidence.json').read_text())
        assert ev['dataset_sha256'] == sha256_file(ROOT / ev['dataset_path']), ad          # recorded from the project root
        assert (ad / 'chat_template.jinja').exists()


def test_decision_and_grid_are_written(profile_path, first_run):
    prof = load_profile(profile_path)
    decision = json.loads((prof.run_dir / 'decide/decision.json').read_text())
    assert decision['candidate'] == 'v6141' and decision['incumbent'] == 'repair' and isinstance(decision['promote'], bool)
    assert (prof.run_dir / 'grid/grid_h6.csv').exists()
    assert (prof.run_dir / 'report/site/index.html').exists()


def test_pair_read_and_soups_are_written_and_shown(profile_path, first_run):
    prof = load_profile(profile_path)
    summary = json.loads((prof.run_dir / 'pair_read/pair_read.summary.json').read_text())
    assert summary['first'] == 'repair' and summary['second'] == 'v6141' and summary['annotators'] == [
        'scripted: prefer the answer that passes more checks, else the shorter']
    assert 'v6141' not in (prof.run_dir / 'pair_read/sheet.csv').read_text()
    weights = (prof.run_dir / 'soups/soup_weights.csv').read_text()
    assert weights.splitlines()[0].startswith('soup,method,rank') and 'uniform' in weights and 'svd' in weights
    for f in ('soups_vs_parents.csv', 'degeneracy.csv', 'reads.csv', 'soups/uniform/training_evidence.json'):
        assert (prof.run_dir / 'soups' / f).exists(), f
    site = prof.run_dir / 'report/site/stages'
    assert 'SCRIPTED READ' in (site / 'pair_read.html').read_text() and 'rel_error_mean' in (site / 'soups.html').read_text()
    report = (prof.run_dir / 'report/report.ipynb').read_text()
    assert 'Blinded pair read: repair vs v6141, SCRIPTED READ' in report and 'distance from the parents' in report


def test_eval_reads_each_adapter_against_its_parent_on_every_instrument(profile_path, first_run):
    "One paired table per adapter with an evaluated parent, every instrument, per family with lengths: the numbers the ladder pairs."
    import pandas as pd
    from rsi_repro.layout import outcomes_path
    from rsi_repro.stats import load_outcomes, paired
    prof = load_profile(profile_path)
    read = pd.read_csv(prof.run_dir / 'eval' / 'paired.csv')
    assert set(read.checkpoint) == {'v6141'} and set(read.parent) == {'repair'}        # repair's parent (dpo) is not evaluated here
    top = read[read.family == '(all)'].set_index('instrument')
    assert list(top.index) == ['h6', 'probe2', 'math', 'open_chat', 'wide_chat', 'termination']
    for inst in top.index:
        find = lambda ck: load_outcomes(outcomes_path(prof.run_dir, ck, inst), ck)
        p = paired(find('repair'), find('v6141'))
        assert (top.loc[inst, 'fixed'], top.loc[inst, 'lost'], top.loc[inst, 'n']) == (p.fixed, p.lost, p.n), inst
        assert top.loc[inst, 'p'] == pytest.approx(p.p) and top.loc[inst, 'length_a'] > 0, inst
    wide = read[(read.instrument == 'wide_chat') & (read.family != '(all)')]
    assert len(wide) == 12 and (wide.n == 1).all()                                     # one prompt of each family at n = 12
    cells = json.loads((prof.run_dir / 'eval' / 'eval.ipynb').read_text())['cells']
    outputs = lambda needle: [o for c in cells if needle in ''.join(c['source']) for o in c.get('outputs', [])]
    assert ['### v6141 against repair'] in [o['data'].get('text/markdown') for o in outputs('paired_reads(') if 'data' in o]
    assert any('image/png' in o.get('data', {}) for o in outputs('plot_length_deltas(read'))      # the battery's two plots


def test_math_is_decontaminated_against_every_corpus_the_run_trains_on(profile_path, first_run):
    from rsi_repro.trained_on import read_decontam_record
    prof = load_profile(profile_path)
    rec = read_decontam_record(prof.run_dir / 'eval' / 'math_problems')
    assert rec[['corpus', 'kind']].values.tolist() == [
        ['tulu3', 'sft'], ['smoltalk', 'sft'], ['ultrafeedback', 'dpo'], ['repair:sampling/mix_x1.npz', 'mix'],
        ['rounds:mixes/r6/mix_x1.npz', 'mix'], ['rounds:mixes/r6/mix_x2.npz', 'mix']]
    assert (rec.documents > 0).all() and (rec.tokens > 0).all()
    assert rec.loc[rec.kind == 'mix', 'documents'].tolist() == [
        json.loads((prof.run_dir / f).read_text())['examples'] for f in
        ('repair/sampling/mix_x1.json', 'rounds/mixes/r6/mix_x1.json', 'rounds/mixes/r6/mix_x2.json')]


def test_repair_and_rounds_report_their_mix_sizes_from_the_files(profile_path, first_run):
    import pandas as pd
    prof = load_profile(profile_path)
    for stage, mix, adapter in (('repair', 'repair/sampling/mix_x1', 'repair/adapter'), ('rounds', 'rounds/mixes/r6/mix_x1', 'rounds/v6141/adapter')):
        rep = pd.read_csv(prof.run_dir / stage / 'mix_target.csv', index_col='measure')
        stats = json.loads((prof.run_dir / f'{mix}.json').read_text())
        ev = json.loads((prof.run_dir / adapter / 'training_evidence.json').read_text())
        assert rep.reached.to_dict() == {'examples': stats['examples'], 'tokens': stats['tokens'],
                                         'supervised_tokens': stats['supervised_tokens'], 'trained_tokens': ev['training_tokens']}, stage
        assert rep.target.isna().all()                                                   # the tiny profile states no targets


def test_decide_reads_every_instrument_beside_the_rule(profile_path, first_run):
    import pandas as pd
    prof = load_profile(profile_path)
    d = json.loads((prof.run_dir / 'decide/decision.json').read_text())
    top = pd.read_csv(prof.run_dir / 'decide' / 'paired.csv').query("family == '(all)'").set_index('instrument')
    assert list(top.index) == ['h6', 'probe2', 'math', 'open_chat', 'wide_chat', 'termination']
    for inst, numbers in d['comparisons'].items():
        assert (top.loc[inst, 'fixed'], top.loc[inst, 'lost']) == (numbers['fixed'], numbers['lost']), inst


def test_second_run_skips_every_stage_in_seconds(profile_path, first_run):
    from rsi_repro.pipeline import plan
    assert {p.action for p in plan(profile_path)} == {'skip'}                 # the dry run agrees
    t0 = time.time()
    again = run(profile_path, log=lambda *a: None)
    assert {r.status for r in again} == {'skipped'}
    assert time.time() - t0 < 30


def test_only_and_force(profile_path, first_run):
    res = run(profile_path, only=['serve'], force=['serve'], log=lambda *a: None)
    assert [(r.stage, r.status) for r in res] == [('serve', 'ran')]


def test_editing_the_sealed_rule_makes_decide_fail(profile_path, first_run):
    "The rule in the profile changes after its results exist: the decision stage refuses, naming the change."
    from rsi_repro.pipeline import StageFailed
    edited = profile_path.with_name('edited.yaml')
    edited.write_text(profile_path.read_text().replace("stages:", "promotion:\n  clauses:\n    - {kind: delta_above, instrument: h6, threshold: -1.0}\nstages:", 1))
    from rsi_repro.pipeline import run_stage
    try:
        # `--only decide` stops first: the stage that sealed the rule is stale under the edited profile
        with pytest.raises(StageFailed, match=r"--only decide would read stage\(s\) that are stale .*preregister \(changed: profile section promotion\)"):
            run(edited, only=['decide'], force=['decide'], log=lambda *a: None)
        # and decide itself, run past that check, refuses the rule that changed since it was sealed
        prof = load_profile(edited)
        with pytest.raises(StageFailed, match="stage 'decide' failed.*changed since it was sealed"):
            run_stage(prof, prof.stage('decide'), force=True, log=lambda *a: None)
    finally:
        edited.unlink(missing_ok=True)
    # the finished decision waited aside; with the sealed rule back, it is put back rather than decided again
    assert [r.status for r in run(profile_path, only=['decide'], log=lambda *a: None)] == ['restored']
    assert (load_profile(profile_path).run_dir / 'decide/decision.json').exists()


def test_unknown_arm_is_refused(profile_path):
    with pytest.raises(KeyError, match="unknown arm"):
        run(profile_path, arms=['v999'], log=lambda *a: None)


def outcome_digest(run_dir: Path) -> str:
    "sha256 over every per-prompt outcome row of a run (which prompts passed, and the answers) and the decision's verdicts."
    h = hashlib.sha256()
    for p in sorted(run_dir.glob('eval*/*/*.outcomes.jsonl')):
        h.update(p.relative_to(run_dir).as_posix().encode())
        for line in p.read_text().splitlines():
            row = json.loads(line)
            h.update(json.dumps({k: row.get(k) for k in ('id', 'checkpoint', 'instrument', 'passed', 'response')}, sort_keys=True).encode())
    d = json.loads((run_dir / 'decide/decision.json').read_text())
    h.update(json.dumps({'promote': d['promote'], 'clauses': [(c.get('kind'), c.get('passed')) for c in d.get('clauses', [])]},
                        sort_keys=True).encode())
    return h.hexdigest()


def test_single_and_double_mixes_are_different_draws(profile_path, first_run):
    """The doubled mix is the single mix's draw plus a second draw of the same pool: every example of the single mix is in it,
    the second draw adds about as many again (a draw's size varies with what the checker passes), and its sha256 is its own."""
    from rsi_repro.corpora import read_sft_mix
    prof = load_profile(profile_path)
    mixes = prof.run_dir / 'rounds' / 'mixes' / 'r6'
    single, double = (list(read_sft_mix(mixes / f'mix_x{k}.npz')['id']) for k in (1, 2))
    assert sha256_file(mixes / 'mix_x1.npz') != sha256_file(mixes / 'mix_x2.npz')
    assert set(single) < set(double) and len(set(double)) == len(double)
    assert 0.5 * len(single) <= len(double) - len(single) <= 1.5 * len(single), (len(single), len(double))
    arms = {r['mix']: r['dataset_sha256'] for r in __import__('csv').DictReader(open(prof.run_dir / 'rounds' / 'arms.csv'))}
    assert arms['single'] != arms['double']


def test_the_study_is_not_all_ties(profile_path, first_run):
    """Stages change which prompts pass: the repair disagrees with the base on some H6 prompts.
    Which way is the demo's to show (`make demo`: results/tiny/summary.json's ladder, pinned by tests/test_study_demo.py);
    a run small enough for CI (two repair steps on a 26-prompt H6) moves a prompt or two either way, so only the
    disagreement is pinned here."""
    from rsi_repro.run_view import ladder
    lad = ladder(load_profile(profile_path), instruments=['h6']).set_index('step')
    base_to_repair = lad.loc['base → repair']
    assert base_to_repair.fixed + base_to_repair.lost > 0, base_to_repair
    assert (lad.fixed + lad.lost).sum() > 0


OUTCOME_STAGES = ['pools', 'sft', 'dpo', 'repair', 'rounds', 'preregister', 'eval', 'eval_arms', 'grid', 'decide']

def test_two_runs_from_scratch_agree_prompt_by_prompt(profile_path, first_run):
    """The same profile run again from scratch (under another run name) gives the same per-prompt outcomes and decision:
    the stages they come from, not the serve, pair-read, soups and report stages, which no outcome reads."""
    again = profile_path.with_name(f'{RUN}-again.yaml')
    again.write_text(SMALL.replace(f"run: {RUN}", f"run: {RUN}-again"))
    try:
        ran = run(again, only=OUTCOME_STAGES, log=lambda *a: None)
        assert [r.stage for r in ran] == OUTCOME_STAGES and {r.status for r in ran} == {'ran'}
        assert outcome_digest(load_profile(again).run_dir) == outcome_digest(load_profile(profile_path).run_dir)
    finally:
        shutil.rmtree(load_profile(again).run_dir, ignore_errors=True); again.unlink(missing_ok=True)

# --- the results site the report stage built (and `make docs` rebuilds), read as a reader and as a browser would ---
import html as _html, os, re, stat
from html.parser import HTMLParser


class _Tags(HTMLParser):
    "Every start tag with its attributes, and the text of the page."
    def __init__(self):
        super().__init__(); self.tags, self.text = [], []
    def handle_starttag(self, tag, attrs): self.tags.append((tag, dict(attrs)))
    def handle_data(self, data): self.text.append(data)


def _parse(text):
    p = _Tags(); p.feed(text); return p


@pytest.fixture(scope='module')
def site(profile_path, first_run):
    return load_profile(profile_path).run_dir / 'report' / 'site'


def test_front_page_states_decision_grid_and_provenance(profile_path, site):
    prof = load_profile(profile_path)
    front = (site / 'index.html').read_text()
    decision = json.loads((prof.run_dir / 'decide/decision.json').read_text())
    assert 'id=decision' in front and ('do not promote' if not decision['promote'] else '>promote<') in front
    assert f"<b>{decision['candidate']}</b>" in front and f"<b>{decision['incumbent']}</b>" in front
    assert "<table class='grid'>" in front and "<table class='ladder'>" in front and "<table class='card-counts'>" in front
    assert '<section id=provenance>' in front and 'profile sha256' in front
    guard = json.loads((prof.run_dir / 'decide/guard.json').read_text())     # this run reads four of the seven checks
    assert "<table class='guard'>" in front and f"<b>{guard['verdict']}</b>" in front
    assert guard['verdict'].startswith('incomplete: 4 of 7 checks read') and 'not read: code, multi-turn, safety' in guard['verdict']
    assert sha256_file(profile_path) in front                                   # the real digest, not a placeholder
    assert re.search(r'git commit</th><td><code>([0-9a-f]{40}|not a git checkout)</code>', front)
    for arm in __import__('pandas').read_csv(prof.run_dir / 'grid/grid_h6.csv')['cell']:
        assert f"<td>{arm}</td>" in front


def test_every_link_resolves_inside_the_site_and_numbers_link_to_their_files(site):
    for page in site.rglob('*.html'):
        for tag, a in _parse(page.read_text()).tags:
            ref = a.get('href') or a.get('src') or ''
            if not ref or ref.startswith(('data:', '#', 'mailto:')): continue
            if re.match(r'(https?:)?//', ref):                              # a reader's link out is fine; a resource is not
                assert tag == 'a', f"{page.relative_to(site)}: external {tag} {ref}"; continue
            assert (page.parent / ref.split('#')[0]).resolve().is_file(), f"{page.relative_to(site)}: broken link {ref}"
    front = (site / 'index.html').read_text()
    for f in ['data/decide/decision.json', 'data/grid/grid_h6.csv', 'data/eval/v6141/h6.outcomes.jsonl']:
        assert f"href='{f}'" in front and (site / f).is_file()


def test_no_page_shows_a_missing_value_as_nan_or_none(site):
    "Empty notes, unstated targets and other missing values are empty cells on every page, never `NaN`, `nan` or `None`."
    shown = {page.relative_to(site).as_posix(): re.findall(r'<td>\s*(?:<a [^>]*>)?\s*(NaN|nan|None|NaT|&lt;NA&gt;)\s*(?:</a>)?\s*</td>', page.read_text())
             for page in site.rglob('*.html')}
    assert {p: v for p, v in shown.items() if v} == {}


def test_site_is_offline_and_publishable(site):
    for page in site.rglob('*.html'):
        text = page.read_text()
        for tag, a in _parse(text).tags:
            if tag in ('script', 'link', 'img', 'iframe', 'source', 'embed'):
                for k in ('src', 'href'):
                    assert not re.match(r'\s*(https?:)?//', a.get(k) or ''), f"{page.relative_to(site)}: {tag} {k}={a[k]}"
        assert not re.search(r'@import|@font-face|url\(\s*["\']?(https?:)?//', text), page
        assert '<script' not in text, page
    for p in [site, *site.rglob('*')]:
        assert stat.S_IMODE(p.stat().st_mode) == (0o755 if p.is_dir() else 0o644), p


def test_pages_are_for_readers(profile_path, site):
    root = str(load_profile(profile_path).root)
    grid = (site / 'stages/grid.html').read_text()
    assert ''.join(_parse(grid).text).count('stage_dir =') == 1 and root not in grid     # one parameters cell, no builder paths
    for page in [*site.glob('stages/*.html'), *site.glob('library/*.html')]:
        text = page.read_text()
        assert "href='../index.html'" in text and "href='../stages.html'" in text and "href='../library.html'" in text, page
        assert not re.search(r'&lt;(Axes|Figure)\b', text) and '#| export' not in text and 'nbdev_export()' not in text, page
        for tag, a in _parse(text).tags:
            if tag == 'img': assert a.get('alt') and 'No description' not in a['alt'], page
    audit = ''.join(_parse((site / 'library/22_card_audit.html').read_text()).text)   # executed: its example tables are there
    assert 'does not follow' in audit and 'shown unexecuted' not in audit
    from rsi_repro.report import is_test_cell
    import nbformat
    tests_only = [c.source.strip() for c in nbformat.read(ROOT / 'nbs/22_card_audit.ipynb', as_version=4).cells
                  if c.cell_type == 'code' and is_test_cell(c.source) and len(c.source.strip()) > 30]
    assert tests_only and not [t for t in tests_only if t in audit]                  # the test-only cells are not on the page


def test_papermill_stage_creates_a_new_stage_folder(profile_path, first_run, tmp_path):
    prof = load_profile(profile_path)
    new = tmp_path / 'NEW'
    r = subprocess.run([sys.executable, '-m', 'papermill', 'nbs/stages/grid.ipynb', str(tmp_path / 'out.ipynb'),
                        '-p', 'profile_path', str(profile_path), '-p', 'run_dir', str(prof.run_dir), '-p', 'stage_dir', str(new),
                        '-y', 'eval_stages: [eval_arms, eval]'], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (new / 'grid_h6.csv').exists()


CHROMIUM = shutil.which('chromium') or shutil.which('chromium-browser')
SHOTS = ROOT / 'outputs' / 'test-screenshots'


def _chromium(args, user_dir):
    cmd = [CHROMIUM, '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage',
           f'--user-data-dir={user_dir}', '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost', *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)")
@pytest.mark.parametrize('page,table', [('index.html', 'grid'), ('stages/grid.html', None)])
def test_chromium_renders_the_site_offline(site, tmp_path, page, table):
    "A browser with the network blocked opens the page from disk: its tables and images are in the rendered DOM, and a screenshot is kept."
    url = (site / page).resolve().as_uri()
    dom = _chromium(['--dump-dom', url], tmp_path / 'profile-dom')
    assert dom.returncode == 0, dom.stderr[-2000:]
    tags = _parse(dom.stdout).tags
    tables = [a for t, a in tags if t == 'table']
    imgs = [a for t, a in tags if t == 'img']
    assert tables and imgs, f"{page}: {len(tables)} tables, {len(imgs)} images in the rendered DOM"
    if table: assert any(a.get('class') == table for a in tables)
    for a in imgs:
        src = a['src']
        assert src.startswith('data:image/') or (site / page).parent.joinpath(src).is_file(), src
    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = SHOTS / (page.replace('/', '_').replace('.html', '.png'))
    r = _chromium([f'--screenshot={shot}', '--window-size=1280,2400', '--hide-scrollbars', url], tmp_path / 'profile-shot')
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    import matplotlib.image as mpimg
    pixels = mpimg.imread(shot)
    assert pixels.std() > 0.01, f"{shot}: a blank screenshot"                    # something was drawn


def test_docs_rebuilds_the_site_without_rerunning_stages(profile_path, first_run, tmp_path):
    "`make docs` runs `python -m rsi_repro.report PROFILE`: the same front page from what the stages left; no manifest is rewritten."
    prof = load_profile(profile_path)
    manifests = [m for s in prof.stages if (m := prof.run_dir / s.name / 'manifest.json').exists()]
    before = {m: m.stat().st_mtime_ns for m in manifests}
    r = subprocess.run([sys.executable, '-m', 'rsi_repro.report', str(profile_path), '--out', str(tmp_path / 'site'), '--no-execute',
                        '--library', '22_*.ipynb'],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    front = (tmp_path / 'site/index.html').read_text()
    assert 'id=decision' in front and '<section id=provenance>' in front and (tmp_path / 'site/data/decide/decision.json').is_file()
    assert 'shown unexecuted' in (tmp_path / 'site/library/22_card_audit.html').read_text()     # --no-execute says so on the page
    assert len(manifests) >= len(prof.stages) - 1 and {m: m.stat().st_mtime_ns for m in manifests} == before


def test_a_rerun_leaves_no_artifact_of_an_earlier_run(profile_path, first_run):
    "A grid table an earlier run on another instrument left in the folder is gone after a rerun, from the folder and the manifest."
    from rsi_repro.pipeline import read_manifest
    grid = load_profile(profile_path).run_dir / 'grid'
    (grid / 'grid_probe2.csv').write_text('cell,delta\nv741,0.5\n')
    assert [r.status for r in run(profile_path, only=['grid'], force=['grid'], log=lambda *a: None)] == ['ran']
    assert not (grid / 'grid_probe2.csv').exists() and list(read_manifest(grid)['outputs']) == ['grid_h6.csv', 'grid_prior_h6.json', 'one_se_h6.json', 'seed_spread_h6.csv']


# --- every number on the front page links to the file it came from, and a browser follows one link of each kind ---
_NUMBER = re.compile(r'^[-+−]?(\d[\d,]*\.?\d*|\.\d+)(e[-+]?\d+)?%?(/[-+−]?(\d[\d,]*\.?\d*|\.\d+)(e[-+]?\d+)?)*$')


class _Cells(HTMLParser):
    "Every table cell of a page: (table class, text, hrefs of the links inside it)."
    def __init__(self):
        super().__init__(); self.cells, self._table, self._cell = [], [], None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == 'table': self._table.append(a.get('class') or '')
        elif tag == 'td': self._cell = ['', []]
        elif tag == 'a' and self._cell is not None: self._cell[1].append(a.get('href', ''))
    def handle_endtag(self, tag):
        if tag == 'td' and self._cell is not None:
            self.cells.append((self._table[-1] if self._table else '', self._cell[0].strip(), self._cell[1])); self._cell = None
        elif tag == 'table' and self._table: self._table.pop()
    def handle_data(self, data):
        if self._cell is not None: self._cell[0] += data


def _front_cells(site):
    p = _Cells(); p.feed((site / 'index.html').read_text()); return p.cells


def test_every_number_in_the_front_pages_tables_links_to_a_file_under_data(site):
    cells = _front_cells(site)
    numbers = [(t, text, hrefs) for t, text, hrefs in cells if _NUMBER.match(text)]
    bare = [(t, text) for t, text, hrefs in numbers if not hrefs or not all(h.startswith('data/') for h in hrefs)]
    assert numbers and not bare, f"numbers on the front page that link to no file under data/: {bare[:10]}"
    assert all((site / h).is_file() for _, _, hrefs in numbers for h in hrefs)
    kinds = {t for t, _, _ in numbers}
    assert {'decision', 'ladder', 'grid', 'se', 'pooled', 'grid-prior', 'math-halves', 'card-counts', 'card', 'pair-read', 'guard'} <= kinds, kinds
    front = (site / 'index.html').read_text()
    assert 'pair_read/sheet.csv' not in front and "<table class='pair-read'>" in front   # the pair read's tally and sign p, not its blind sheet
    clause_files = {h for t, _, hrefs in cells if t == 'decision' for h in hrefs}      # a clause links to the candidate's per-prompt file
    assert clause_files and all(h.endswith('.outcomes.jsonl') and '/v6141/' in h for h in clause_files), clause_files
    grid_files = {h for t, _, hrefs in cells if t == 'grid' for h in hrefs}
    assert grid_files == {'data/eval_arms/v741/h6.outcomes.jsonl'}, grid_files


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)")
def test_a_browser_clicks_one_link_of_each_kind_on_the_front_page(site, tmp_path):
    "Headless Chromium opens the front page from disk and clicks, with the mouse, the first link of every table: each leads to its file under data/."
    from cdp import Browser
    kinds = sorted({t for t, _, hrefs in _front_cells(site) if hrefs and t})
    browser = Browser(CHROMIUM, tmp_path / 'profile', tmp_path / 'downloads')
    try:
        front = (site / 'index.html').resolve().as_uri()
        tab = browser.page(front)
        for kind in kinds:
            browser.evaluate(tab, "document.querySelectorAll('details').forEach(d => d.open = true)")   # a reader opens 'every figure'
            href = browser.evaluate(tab, f"document.querySelector('table.{kind} a').getAttribute('href')")
            landed = browser.click(tab, f"table.{kind} a")
            assert landed == (site / href).resolve().as_uri() and (site / href).stat().st_size > 0, (kind, href, landed)
            browser.goto(tab, front)
    finally:
        browser.close()
    assert {'decision', 'ladder', 'grid', 'se', 'pair-read'} <= set(kinds), kinds


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)")
def test_markup_planted_in_ids_and_prompts_is_text_in_the_browser(site, tmp_path):
    """Every serve and open-chat prompt of this run carries `PLANTED` (an element with a handler) in its id and its text
    (conftest.py). Headless Chromium opens every page of the site: the handler never ran, no element of the site has an
    event-handler attribute or a script, and the planted markup is on the pages as text a reader sees."""
    from cdp import Browser, pages_showing_as_text
    from conftest import PLANTED
    browser = Browser(CHROMIUM, tmp_path / 'profile', tmp_path / 'downloads')
    try: shown = pages_showing_as_text(browser, site, PLANTED, 'window.__planted === 1')
    finally: browser.close()
    assert {'stages/serve.html', 'stages/sft.html'} <= set(shown), shown      # the ids and prompts reached the pages, as text
