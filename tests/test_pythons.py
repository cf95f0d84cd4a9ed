"The Pythons the package claims are the ones CI tests, and this interpreter is one of them."
import re, sys
from configparser import ConfigParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CFG = ConfigParser(delimiters=["="]); CFG.read(ROOT / "settings.ini", encoding="utf-8")
TESTED = CFG["DEFAULT"]["tested_pythons"].split()

def test_tested_pythons_run_from_min_python_without_a_gap():
    assert TESTED[0] == CFG["DEFAULT"]["min_python"]
    minors = [int(v.split(".")[1]) for v in TESTED]
    assert minors == list(range(minors[0], minors[0] + len(minors))), TESTED

def test_readme_claims_what_ci_tests():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"Python {TESTED[0]} to {TESTED[-1]}" in readme
    assert not re.search(r"Python ≥ ?3\.\d+", readme)  # an open-ended claim no CI run backs
    ci = (ROOT / ".ci" / "run").read_text()
    commands = [l.strip() for l in ci.splitlines() if not l.lstrip().startswith('#')]
    assert "tested_pythons" in ci                                                          # make test-core, in three steps:
    assert {"step make core-wheel", "step side_by_side core-env", "step side_by_side core-run NB_WORKERS=1"} <= set(commands)
    assert 'make "$target" PYTHON="$py"' in ci                                             # each of the other Pythons

def test_this_interpreter_is_claimed():
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in TESTED
