"""The README's section on the real model is written from results/smollm2/ by tools/results_smollm2.py, and a check fails,
naming the line, when either side moved without the other: an edited figure in the README, or an edited result file."""
import shutil, sys

import pytest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'tools'))
import results_smollm2 as rs      # noqa: E402


def test_the_readme_section_is_what_results_smollm2_gives():
    assert rs.check() is None


def test_an_edited_figure_in_the_readme_is_named(tmp_path):
    readme = (ROOT / 'README.md').read_text()
    line = next(l for l in rs.readme_section(readme).splitlines() if l.startswith('| base → repair | h6 |'))
    edited = tmp_path / 'README.md'
    edited.write_text(readme.replace(line, line.replace('140 / 92', '141 / 92')))
    said = rs.check(readme_path=edited)
    assert said and '141 / 92' in said and '140 / 92' in said


def test_an_edited_result_file_is_named(tmp_path):
    res = tmp_path / 'smollm2'
    shutil.copytree(rs.RESULTS, res)
    text = (res / 'paired.csv').read_text()
    (res / 'paired.csv').write_text(text.replace(',140,92,', ',138,92,'))
    said = rs.check(res=res)
    assert said and '138 / 92' in said


def test_a_harness_read_of_the_base_alone_is_left_out_and_any_other_missing_read_is_an_error(tmp_path):
    res = tmp_path / 'smollm2'
    shutil.copytree(rs.RESULTS, res)
    assert (res / 'base_ifeval_harness.summary.csv').exists()      # evals.only: {ifeval_harness: [base]}
    assert not (res / 'repair_ifeval_harness.summary.csv').exists()
    rows = [l for l in rs.block(res).splitlines() if l.startswith('| repair | ')]
    assert rows and not any('| harness:' in l for l in rows) and any("| the study's serving:" in l for l in rows)
    (res / 'repair_ifeval.summary.csv').unlink()                    # the study's own IFEval read is never optional
    with pytest.raises(FileNotFoundError, match='repair_ifeval.summary.csv'): rs.block(res)
