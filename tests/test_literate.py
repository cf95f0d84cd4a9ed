"""The notebooks read as fastcore's do: no export cell over 60 lines, and every export cell shown working (a code cell
that is not an export, an example or a test, follows it before the next export cell)."""
import json, re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / 'nbs').glob('*.ipynb'))
MAX_LINES = 60


def export_cells(nb_path: Path):
    "(cell id, its line count, whether a non-export code cell follows it before the next export cell) for each export cell."
    code = [c for c in json.loads(nb_path.read_text())['cells'] if c['cell_type'] == 'code']
    source = [''.join(c['source']) for c in code]
    exported = [re.match(r'\s*#\|\s*export\b', s) is not None for s in source]
    for i, (c, s) in enumerate(zip(code, source)):
        if exported[i]: yield c.get('id'), len(s.splitlines()), i + 1 < len(code) and not exported[i + 1]


def test_the_check_sees_what_it_counts(tmp_path):
    cell = lambda s: {'cell_type': 'code', 'id': s[:4], 'source': s}
    nb = tmp_path / 'x.ipynb'
    nb.write_text(json.dumps({'cells': [cell('#| export\ndef f(): pass'), cell('test_eq(f(), None)'),
                                        cell('#| export\n' + 'x = 1\n' * 70), cell('#| export\ndef g(): pass')]}))
    assert [(n, shown) for _, n, shown in export_cells(nb)] == [(2, True), (71, False), (2, False)]


def test_no_export_cell_is_over_60_lines():
    assert [f"{p.name} {cid}: {n} lines" for p in NOTEBOOKS for cid, n, _ in export_cells(p) if n > MAX_LINES] == []


def test_every_export_cell_is_shown_working_before_the_next():
    assert [f"{p.name} {cid}" for p in NOTEBOOKS for cid, _, shown in export_cells(p) if not shown] == []
