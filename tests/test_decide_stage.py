"The preregister and decide stage notebooks, run by papermill as the pipeline runs them, on a small sealed run."
import json
from pathlib import Path

import pytest
import yaml

from rsi_repro.preregister import write_outcomes
from rsi_repro.stats import pair_from_counts

pm = pytest.importorskip("papermill")
ROOT = Path(__file__).resolve().parents[1]
RULE = {"description": "positive H6 delta, no collapsed family, probe2 at or above the incumbent",
        "clauses": [{"kind": "delta_above", "instrument": "h6", "threshold": 0.0},
                    {"kind": "no_family_collapse", "instrument": "h6", "max_drop": 0.05},
                    {"kind": "delta_at_least", "instrument": "probe2", "threshold": 0.0}]}


def _profile(tmp_path, rule) -> Path:
    data = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    data.update(stages=[], prompts={}, promotion=rule)
    for k in ("sft", "dpo", "evals"): data.pop(k)   # they name the project's data files, which a profile outside it cannot reach
    (tmp_path / "tiny_base").mkdir(exist_ok=True)   # these stages read only the rule; the base is never loaded
    data["base"]["name_or_path"] = str(tmp_path / "tiny_base")
    p = tmp_path / "profile.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def _run(nb, tmp_path, **params):
    out = tmp_path / f"{nb}.out.ipynb"
    pm.execute_notebook(str(ROOT / "nbs" / "stages" / f"{nb}.ipynb"), str(out), parameters=params, cwd=str(ROOT),
                        kernel_name="python3", progress_bar=False)
    return out


def _outcomes(tmp_path):
    inc, cand = {}, {}
    for inst, counts in {"h6": (20, 8, 150, 22), "probe2": (9, 6, 40, 5)}.items():
        a, b = pair_from_counts(*counts, prefix=f"{inst}-")
        fam = {k: f"fam{i % 3}" for i, k in enumerate(a.index)}
        inc[inst] = str(write_outcomes(tmp_path / "eval" / f"{inst}.incumbent.jsonl", a, fam, "stage3"))
        cand[inst] = str(write_outcomes(tmp_path / "eval" / f"{inst}.candidate.jsonl", b, fam, "stage4"))
    return inc, cand


def test_seal_then_decide_writes_the_decision(tmp_path):
    profile, seal_path = _profile(tmp_path, RULE), tmp_path / "promotion.seal.json"
    _run("preregister", tmp_path, profile_path=str(profile), stage_dir=str(tmp_path / "preregister"),
         run_dir=str(tmp_path), seal_path=str(seal_path))
    inc, cand = _outcomes(tmp_path)
    (tmp_path / "decide").mkdir()
    _run("decide", tmp_path, profile_path=str(profile), stage_dir=str(tmp_path / "decide"), run_dir=str(tmp_path),
         seal_path=str(seal_path), incumbent="stage3", candidate="stage4", incumbent_outcomes=inc, candidate_outcomes=cand)
    d = json.loads((tmp_path / "decide" / "decision.json").read_text())
    assert d["candidate"] == "stage4" and d["comparisons"]["h6"]["fixed"] == 20
    # Expected by hand from _outcomes (prompt i is in family fam{i % 3}; pair_from_counts lays out fixed, lost, tied,
    # tied_fail in that order):
    #   h6: 20 fixed, 8 lost over n = 20 + 8 + 150 + 22 = 200, so delta = 12/200 = 0.06 > 0: delta_above passes.
    #   h6 per family: fixed prompts 0..19 give fam0 7 (0,3,..,18), fam1 7 (1,..,19), fam2 6 (2,..,17); lost prompts
    #   20..27 give fam0 3 (21,24,27), fam1 2 (22,25), fam2 3 (20,23,26); sizes 67, 67, 66. Deltas 4/67, 5/67, 3/66:
    #   the worst is fam2 at +3/66, above -0.05, so no_family_collapse passes.
    #   probe2: 9 fixed, 6 lost over n = 9 + 6 + 40 + 5 = 60, delta = 3/60 = 0.05 >= 0: delta_at_least passes.
    #   Every clause passes, so the candidate is promoted.
    assert [c["kind"] for c in d["clauses"]] == ["delta_above", "no_family_collapse", "delta_at_least"]
    assert [c["passed"] for c in d["clauses"]] == [True, True, True]
    assert d["clauses"][0]["evidence"]["delta"] == pytest.approx(12 / 200)
    assert d["clauses"][1]["evidence"]["worst"] == "fam2"
    assert d["clauses"][1]["evidence"]["worst_delta"] == pytest.approx(3 / 66)
    assert {g: (v["fixed"], v["lost"], v["n"]) for g, v in d["clauses"][1]["evidence"]["groups"].items()} == \
        {"fam0": (7, 3, 67), "fam1": (7, 2, 67), "fam2": (6, 3, 66)}
    assert d["clauses"][2]["evidence"]["delta"] == pytest.approx(3 / 60)
    assert d["promote"] is True
    # beside the verdict, every instrument read per family; on the rule's instruments its overall rows are the decision's numbers
    import pandas as pd
    read = pd.read_csv(tmp_path / "decide" / "paired.csv")
    top = read[read.family == "(all)"].set_index("instrument")
    assert sorted(top.index) == ["h6", "probe2"] and set(read.candidate) == {"stage4"} and set(read.incumbent) == {"stage3"}
    for inst, numbers in d["comparisons"].items():
        for k in ("n", "fixed", "lost", "tied", "tied_fail"): assert top.loc[inst, k] == numbers[k], (inst, k)
        for k in ("delta", "p", "se", "rate_a", "rate_b"): assert top.loc[inst, k] == pytest.approx(numbers[k]), (inst, k)
    assert sorted(read[read.instrument == "h6"].family) == ["(all)", "fam0", "fam1", "fam2"]
    assert json.loads((tmp_path / "decide" / "paired_regressions.json").read_text())["regressions"] == []


def test_decide_stage_fails_when_the_rule_was_edited_after_its_results(tmp_path):
    profile, seal_path = _profile(tmp_path, RULE), tmp_path / "promotion.seal.json"
    _run("preregister", tmp_path, profile_path=str(profile), stage_dir=str(tmp_path / "preregister"),
         run_dir=str(tmp_path), seal_path=str(seal_path))
    inc, cand = _outcomes(tmp_path)
    edited = {**RULE, "clauses": [{**RULE["clauses"][0], "threshold": 0.5}, *RULE["clauses"][1:]]}
    profile = _profile(tmp_path, edited)
    (tmp_path / "decide").mkdir()
    with pytest.raises(pm.PapermillExecutionError, match="changed since it was sealed"):
        _run("decide", tmp_path, profile_path=str(profile), stage_dir=str(tmp_path / "decide"), run_dir=str(tmp_path),
             seal_path=str(seal_path), incumbent_outcomes=inc, candidate_outcomes=cand)
    assert not (tmp_path / "decide" / "decision.json").exists()


def test_a_rule_resealed_after_its_results_gives_a_decision_labelled_post_hoc(tmp_path):
    "Re-sealing after the evaluation: the decide stage applies the new rule and says, in decision.json, on its page and on the front page, that the verdict is post hoc."
    import time
    from rsi_repro.report import _decision_section
    profile, seal_path = _profile(tmp_path, RULE), tmp_path / "promotion.seal.json"
    _run("preregister", tmp_path, profile_path=str(profile), stage_dir=str(tmp_path / "preregister"),
         run_dir=str(tmp_path), seal_path=str(seal_path))
    inc, cand = _outcomes(tmp_path)
    time.sleep(0.05)          # file clocks tick every few ms: the new seal falls on a later tick than the results
    edited = {**RULE, "clauses": [{**RULE["clauses"][0], "threshold": 0.5}, *RULE["clauses"][1:]]}
    profile = _profile(tmp_path, edited)
    _run("preregister", tmp_path, profile_path=str(profile), stage_dir=str(tmp_path / "preregister"),
         run_dir=str(tmp_path), seal_path=str(seal_path), replace_seal=True)
    args = dict(profile_path=str(profile), stage_dir=str(tmp_path / "decide"), run_dir=str(tmp_path), seal_path=str(seal_path),
                incumbent="stage3", candidate="stage4", incumbent_outcomes=inc, candidate_outcomes=cand)
    with pytest.raises(pm.PapermillExecutionError, match="before the rule was sealed"):
        _run("decide", tmp_path, **args, allow_post_hoc=False)
    assert not (tmp_path / "decide" / "decision.json").exists()
    out = _run("decide", tmp_path, **args)
    d = json.loads((tmp_path / "decide" / "decision.json").read_text())
    assert d["preregistered"] is False and len(d["post_hoc"]) == 4                  # 2 instruments x incumbent, candidate
    assert all("before the rule was sealed" in why for why in d["post_hoc"])
    assert d["promote"] is False and d["clauses"][0]["passed"] is False             # the new rule judged: 0.06 is not above 0.5
    assert "POST HOC, not the pre-registered decision: 4 result file(s) predate the seal" in out.read_text()
    page = _decision_section(tmp_path, tmp_path / "site")
    assert "do not promote</span> (post hoc)" in page and "Post hoc, not the pre-registered decision" in page
