"Sealed pre-registration: a rule edited, or re-sealed, after its results exist cannot judge them."
import json
import os
import time
from datetime import datetime, timedelta, timezone

import pytest

from rsi_repro.preregister import SealError, decide, read_seal, result_time, seal, write_outcomes
from rsi_repro.promotion import CLAUSES, PromotionRule, RuleError
from rsi_repro.stats import pair_from_counts

RULE = {"description": "positive wide-H6 delta, no collapsed family, probe2 at or above the incumbent",
        "clauses": [{"kind": "delta_above", "instrument": "h6", "threshold": 0.0},
                    {"kind": "no_family_collapse", "instrument": "h6", "max_drop": 0.05},
                    {"kind": "delta_at_least", "instrument": "probe2", "threshold": 0.0}]}


def _write_pair(folder, inst, counts, fam_of=lambda i: f"fam{i % 4}"):
    a, b = pair_from_counts(*counts, prefix=f"{inst}-")
    fam = {k: fam_of(i) for i, k in enumerate(a.index)}
    return (write_outcomes(folder / inst / "incumbent.jsonl", a, fam),
            write_outcomes(folder / inst / "candidate.jsonl", b, fam))


@pytest.fixture
def sealed_run(tmp_path):
    rule = PromotionRule.from_dict(RULE, where="test.yaml: promotion")
    seal(rule, tmp_path / "promotion.seal.json")
    h6 = _write_pair(tmp_path, "h6", (37, 36, 700, 27))
    p2 = _write_pair(tmp_path, "probe2", (102, 83, 773, 242))
    return rule, tmp_path, {"h6": h6[0], "probe2": p2[0]}, {"h6": h6[1], "probe2": p2[1]}


def test_decision_after_seal_records_every_number(sealed_run, tmp_path):
    rule, run, inc, cand = sealed_run
    d = decide(rule, run / "promotion.seal.json", inc, cand, "v6141", "v749")
    assert d.promote
    rec = json.loads(json.dumps(d.to_dict()))
    assert rec["comparisons"]["h6"]["fixed"] == 37 and rec["comparisons"]["h6"]["lost"] == 36
    assert rec["clauses"][0]["evidence"]["delta"] == pytest.approx(1 / 800)
    assert set(rec["clauses"][1]["evidence"]["groups"]) == {"fam0", "fam1", "fam2", "fam3"}
    assert {r["role"] for r in rec["results"]} == {"incumbent", "candidate"}
    assert all(len(r["sha256"]) == 64 for r in rec["results"])
    d.write(tmp_path / "decision.json")
    assert json.loads((tmp_path / "decision.json").read_text())["rule_sha256"] == rule.sha256


def test_editing_a_sealed_rule_after_its_results_exist_fails(sealed_run):
    rule, run, inc, cand = sealed_run
    loosened = PromotionRule.from_dict({**RULE, "clauses": [{**RULE["clauses"][0], "threshold": -0.01}, *RULE["clauses"][1:]]})
    with pytest.raises(SealError, match=r"changed since it was sealed .*clause 0: sealed .*'threshold': 0.0.* -> now .*-0.01"):
        decide(loosened, run / "promotion.seal.json", inc, cand)


def test_resealing_an_edited_rule_after_its_results_exist_fails(sealed_run):
    rule, run, inc, cand = sealed_run
    edited = PromotionRule.from_dict({**RULE, "clauses": RULE["clauses"][:2]})
    with pytest.raises(SealError, match=r"set the preregister stage's parameter replace_seal to true \(in the profile: "
                                        r"`params: \{replace_seal: true\}`.*from Python: seal\(\.\.\., replace=True\)"):
        seal(edited, run / "promotion.seal.json")
    time.sleep(0.05)
    seal(edited, run / "promotion.seal.json", replace=True)
    with pytest.raises(SealError, match="before the rule was sealed"):
        decide(edited, run / "promotion.seal.json", inc, cand)


def test_copied_old_results_are_caught_by_their_manifest(sealed_run):
    "A fresh mtime (copy, checkout) does not hide results whose manifest says they began before the seal."
    rule, run, inc, cand = sealed_run
    before = datetime.now(timezone.utc) - timedelta(hours=1)
    (run / "h6" / "manifest.json").write_text(json.dumps({"started_at": before.isoformat()}))
    with pytest.raises(SealError, match=r"manifest.started_at.*before the rule was sealed"):
        decide(rule, run / "promotion.seal.json", inc, cand)


def test_old_mtime_is_caught_without_manifest(sealed_run):
    rule, run, inc, cand = sealed_run
    old = time.time() - 3600
    os.utime(cand["probe2"], (old, old))
    with pytest.raises(SealError, match=r"probe2/candidate.jsonl.*\(mtime\)"):
        decide(rule, run / "promotion.seal.json", inc, cand)


def test_manifest_time_without_timezone_is_refused(sealed_run):
    rule, run, inc, cand = sealed_run
    (run / "h6" / "manifest.json").write_text(json.dumps({"created_at": "2026-11-29T10:00:00"}))
    with pytest.raises(SealError, match="no timezone"):
        result_time(inc["h6"])


def test_manifest_recording_another_seal_is_refused(sealed_run):
    rule, run, inc, cand = sealed_run
    (run / "h6" / "manifest.json").write_text(json.dumps({"promotion_seal_sha256": "0" * 64}))
    with pytest.raises(SealError, match="ran under seal 000000000000"):
        decide(rule, run / "promotion.seal.json", inc, cand)


def test_no_seal_no_decision(sealed_run, tmp_path):
    rule, run, inc, cand = sealed_run
    with pytest.raises(SealError, match="no seal"):
        decide(rule, tmp_path / "elsewhere.seal.json", inc, cand)


def test_tampered_seal_file_is_refused(sealed_run):
    rule, run, inc, cand = sealed_run
    p = run / "promotion.seal.json"
    rec = json.loads(p.read_text())
    rec["rule"]["clauses"][0]["threshold"] = -1.0
    p.write_text(json.dumps(rec))
    with pytest.raises(SealError, match="seal file was edited"):
        read_seal(p)


def test_sealing_the_same_rule_again_keeps_the_first_seal(tmp_path):
    rule = PromotionRule.from_dict(RULE)
    first = seal(rule, tmp_path / "s.json")
    time.sleep(0.02)
    assert seal(rule, tmp_path / "s.json").sealed_at_ns == first.sealed_at_ns


def test_a_collapsed_family_blocks_promotion(tmp_path):
    rule = PromotionRule.from_dict(RULE)
    seal(rule, tmp_path / "promotion.seal.json")
    # fam0 holds all 40 lost prompts (and 152 tied-fail): it drops by 40/192 = 0.21 > 0.05 while H6 gains +0.03
    h6 = _write_pair(tmp_path, "h6", (88, 40, 1200, 272), fam_of=lambda i: "fam0" if 88 <= i < 128 or i >= 1448 else f"fam{1 + i % 3}")
    p2 = _write_pair(tmp_path, "probe2", (10, 5, 80, 5))
    d = decide(rule, tmp_path / "promotion.seal.json", {"h6": h6[0], "probe2": p2[0]}, {"h6": h6[1], "probe2": p2[1]})
    assert [c["passed"] for c in d.clauses] == [True, False, True] and not d.promote
    assert d.clauses[1]["evidence"]["worst"] == "fam0"


def test_missing_instrument_is_an_error(sealed_run):
    rule, run, inc, cand = sealed_run
    with pytest.raises(SealError, match="probe2"):
        decide(rule, run / "promotion.seal.json", {"h6": inc["h6"]}, cand)


@pytest.mark.parametrize("bad,msg", [
    ({"clauses": [{"kind": "nope", "instrument": "h6"}]}, "unknown clause kind 'nope'"),
    ({"clauses": [{"kind": "delta_above", "instrument": "h6", "threshold": 0, "extra": 1}]}, "unknown key(s) ['extra']"),
    ({"clauses": [{"kind": "no_family_collapse", "instrument": "h6", "max_drop": -0.1}]}, "max_drop must be >= 0"),
    ({"clauses": [{"kind": "delta_above", "instrument": "", "threshold": 0}]}, "instrument must be a non-empty string"),
    ({"clauses": [{"kind": "delta_above", "instrument": "h6", "threshold": True}]}, "threshold must be a finite number"),
    ({"clauses": []}, "non-empty list"),
    ({"clauses": [{"kind": "significant", "instrument": "h6", "alpha": 1.5}]}, "alpha must be in (0, 1)"),
])
def test_rule_validation_names_where(bad, msg):
    with pytest.raises(RuleError) as e:
        PromotionRule.from_dict(bad, where="configs/x.yaml: promotion")
    assert msg in str(e.value) and "configs/x.yaml: promotion" in str(e.value)


def test_every_clause_kind_round_trips():
    examples = {"delta_above": {"instrument": "h6", "threshold": 0.0},
                "delta_at_least": {"instrument": "probe2", "threshold": 0.0},
                "no_family_collapse": {"instrument": "h6", "max_drop": 0.05, "by": "family"},
                "significant": {"instrument": "h6", "alpha": 0.05}}
    assert set(examples) == set(CLAUSES)
    rule = PromotionRule.from_dict({"clauses": [{"kind": k, **v} for k, v in examples.items()]})
    assert PromotionRule.from_dict(rule.to_dict()) == rule


def test_pipeline_manifest_above_the_outcomes_is_found_and_read_at_its_precision(sealed_run):
    "The pipeline's stage manifest records `started` to the second, in the stage folder above the outcome files."
    rule, run, inc, cand = sealed_run
    s = read_seal(run / "promotion.seal.json")
    same_second = datetime.fromtimestamp(s.sealed_at_ns // 10**9, tz=timezone.utc).isoformat(timespec="seconds")
    (run / "manifest.json").write_text(json.dumps({"stage": "eval", "started": same_second}))
    assert result_time(inc["h6"])["manifest"] == str(run / "manifest.json")
    assert decide(rule, run / "promotion.seal.json", inc, cand).promote   # same second as the seal: not refused
    an_hour_before = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat(timespec="seconds")
    (run / "manifest.json").write_text(json.dumps({"stage": "eval", "started": an_hour_before}))
    with pytest.raises(SealError, match=r"manifest.started.*before the rule was sealed"):
        decide(rule, run / "promotion.seal.json", inc, cand)
