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
    from rsi_repro.front_page import _decision_section
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


def test_the_nemotron_profile_expresses_the_cards_v749_episode(tmp_path):
    """The card's v749: the sealed rule passes it (H6 37 fixed / 36 lost, probe2 102 / 83, from the claims file) and the
    profile's override keeps the incumbent for three reasons. decision.json, the decide page and the site's front page
    show the rule's verdict, the override and the reasons side by side; beside them, the reads the card weighed v749
    by, from the same counts: pooled 139 / 119 with its exact p, the SE beside each delta, the failure-reason table, and
    the grid's prior and seed spread from the card's nine cells."""
    import pandas as pd
    from rsi_repro import grid
    from rsi_repro.card_audit import load_claims, printed
    from rsi_repro.layout import grid_table_path
    from rsi_repro.front_page import _decision_section, judgement_section
    from rsi_repro.stats import sign_test
    data = yaml.safe_load((ROOT / "configs" / "nemotron.yaml").read_text())
    data.update(stages=[], prompts={})                      # the decide stage reads the rule, the overrides and evals' flags
    profile = tmp_path / "nemotron.yaml"
    profile.write_text(yaml.safe_dump(data))
    seal_path = tmp_path / "preregister" / "promotion.seal.json"
    _run("preregister", tmp_path, profile_path=str(profile), stage_dir=str(tmp_path / "preregister"), run_dir=str(tmp_path),
         seal_path=str(seal_path))
    claims = load_claims(ROOT / "data" / "claims" / "seed_card.yaml")
    inc, cand = {}, {}
    for inst, claim, rate_a in (("h6", claims["v749"], "0.8344"), ("probe2", claims["v749_probe2_1200"], "0.7133")):
        f, l, n = claim["counts"]["fixed"], claim["counts"]["lost"], claim["n"]
        tied = round(printed(rate_a)[0] * n) - l                       # the incumbent's rate: v6141's on H6, the card's 0.7133 on probe2
        a, b = pair_from_counts(f, l, tied, n - f - l - tied, prefix=f"{inst}-")
        fam = {k: f"fam{i % 12}" for i, k in enumerate(a.index)}
        inc[inst] = str(write_outcomes(tmp_path / "eval" / "v6141" / f"{inst}.outcomes.jsonl", a, fam, "v6141"))
        cand[inst] = str(write_outcomes(tmp_path / "eval" / "v749" / f"{inst}.outcomes.jsonl", b, fam, "v749"))
    cells = pd.DataFrame([{"cell": c, **claims[c]["arm"], "seed": i, "delta": printed(claims[c]["reported"]["delta"])[0]}
                          for i, c in enumerate(claims["grid_smallest_p"]["cells"])])
    (tmp_path / "grid").mkdir()
    cells.to_csv(grid_table_path(tmp_path / "grid", "h6"), index=False)
    grid_table_path(tmp_path / "grid", "h6", "grid_prior").write_text(json.dumps(grid.grid_prior(cells)))
    grid.seed_spread(cells).to_csv(grid_table_path(tmp_path / "grid", "h6", "seed_spread"), index=False)
    stage = tmp_path / "decide_v749"
    stage.mkdir()
    page = _run("decide", tmp_path, profile_path=str(profile), stage_dir=str(stage), run_dir=str(tmp_path), seal_path=str(seal_path),
                incumbent="v6141", candidate="v749", incumbent_outcomes=inc, candidate_outcomes=cand, grid_dir=str(tmp_path / "grid"))
    d = json.loads((stage / "decision.json").read_text())
    reasons = data["overrides"][0]["reasons"]
    assert [c["passed"] for c in d["clauses"]] == [True, True, True] and d["promote"] is True and d["rule_verdict"] == "promote"
    assert d["verdict"] == "keep" and d["override"]["against_rule"] is True and d["override"]["reasons"] == reasons and len(reasons) == 3
    sealed = json.loads(seal_path.read_text())                # the override rewrites nothing the rule decided
    assert d["override"]["where"] == "nemotron.yaml: overrides[0]" and (d["rule"], d["rule_sha256"]) == (sealed["rule"], sealed["rule_sha256"])
    j = json.loads((stage / "judgement.json").read_text())
    assert (j["pooled"]["fixed"], j["pooled"]["lost"], j["pooled"]["p"]) == (139, 119, sign_test(139, 119))
    assert {r["instrument"]: r["n"] for r in j["se"]} == {"h6": 1600, "probe2": 1200} and all(r["se"] > 0 for r in j["se"])
    assert {(r["instrument"], r["fixed"], r["lost"]) for r in j["failure_reasons"]} == {("h6", 37, 36), ("probe2", 102, 83)}
    assert (j["grid_prior"]["cells"], j["grid_prior"]["positive"], j["grid_prior"]["negative"]) == (9, 3, 6)
    assert [s["cells"] for s in j["seed_spread"]] == ["v741/v742", "v743/v744", "v747/v748"]
    text = page.read_text()                                   # the decide page: both verdicts, the reasons, the pooled read
    assert "OVERRIDDEN by the card's author: KEEP (nemotron.yaml: overrides[0]), because:" in text
    assert all(json.dumps(r)[1:40] in text for r in reasons) and "139 fixed / 119 lost" in text
    front = _decision_section(tmp_path, tmp_path / "site", "decide_v749") + judgement_section(tmp_path, tmp_path / "site", "decide_v749")
    assert "<span class=yes>promote</span>" in front and "<b>Overridden against the rule:</b>" in front
    assert "<td>stands</td><td><b>keep</b></td>" in front and front.count("<li>") == 3
    assert all(__import__("html").escape(r) in front for r in reasons)
    assert "<a href='data/eval/v749/h6.outcomes.jsonl'>" in front and "139 fixed / 119 lost" in front
