"Integration and property tests of rsi_repro.stats and rsi_repro.grid against the seed card's paired reads."
import json
import math

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from rsi_repro.grid import candidates_table, family_grid, grid_table
from rsi_repro.stats import (ALL, OutcomeError, Paired, compare, detectable_delta, load_outcomes, pair_from_counts,
                             paired, paired_se, pool, power, power_exact, prompts_needed, sign_test)

# (fixed, lost, p as the card prints it, decimals printed): every sign test the card reports with its counts
CARD_SIGN_TESTS = [
    (151, 79, 2.4e-06, None),  # H6-1600 promotion, printed to 2 significant figures
    (13, 20, 0.296, 3), (14, 20, 0.392, 3), (17, 19, 0.868, 3), (18, 17, 1.000, 3), (9, 14, 0.405, 3),
    (6, 7, 1.000, 3), (20, 16, 0.618, 3), (15, 18, 0.728, 3), (37, 36, 1.000, 3),  # the nine grid cells
    (102, 83, 0.186, 3),  # v749 probe2-1200
    (5, 4, 1.000, 3), (6, 4, 0.754, 3),  # open chat, 120 prompts
    (19, 13, 0.377, 3),  # blinded pair read
    (0, 1, 1.0, 1),  # safety probe, one discordant prompt
    (6, 5, 1.000, 3),  # wide open chat, 231 prompts
]


@pytest.mark.parametrize("fixed,lost,printed,decimals", CARD_SIGN_TESTS)
def test_card_sign_tests_reproduce(fixed, lost, printed, decimals):
    p = sign_test(fixed, lost)
    if decimals is None:
        assert float(f"{p:.1e}") == printed
    else:
        assert round(p, decimals) == printed


def test_sign_test_matches_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    for f, l in [(151, 79), (139, 119), (0, 7), (50, 50), (3, 40)]:
        assert math.isclose(sign_test(f, l), scipy_stats.binomtest(f, f + l).pvalue, rel_tol=1e-9)


def test_card_pooled_discordance_does_not_give_019():
    "The card's 'pooled 139 fixed against 119 lost, about p = 0.19' does not follow: the exact test gives 0.237."
    assert round(sign_test(139, 119), 3) == 0.237
    assert abs(sign_test(139, 119) - 0.19) > 0.04


def test_h6_promotion_row_rebuilt_from_per_prompt_outcomes(tmp_path):
    a, b = pair_from_counts(151, 79, 1184, 186, prefix="h6-")
    fams = [f"family{i % 12}" for i in range(1600)]
    for name, s in (("incumbent", a), ("candidate", b)):
        with open(tmp_path / f"{name}.jsonl", "w") as fh:
            for (k, v), fam in zip(s.items(), fams):
                fh.write(json.dumps({"id": k, "family": fam, "passed": bool(v), "checkpoint": name}) + "\n")
    r = paired(load_outcomes(tmp_path / "incumbent.jsonl"), load_outcomes(tmp_path / "candidate.jsonl"))
    assert (r.n, r.fixed, r.lost, r.tied, r.tied_fail) == (1600, 151, 79, 1184, 186)
    assert (round(r.rate_a, 4), round(r.rate_b, 4), round(r.delta, 4)) == (0.7894, 0.8344, 0.0450)
    assert float(f"{r.p:.1e}") == 2.4e-06
    assert r.se == pytest.approx(math.sqrt((230 / 1600 - 0.045 ** 2) / 1600))
    table = compare(load_outcomes(tmp_path / "incumbent.jsonl"), load_outcomes(tmp_path / "candidate.jsonl"))
    assert table.loc[ALL, "net"] == 72 and table.drop(index=ALL)["n"].sum() == 1600


def test_order_of_prompts_does_not_matter():
    a, b = pair_from_counts(5, 3, 10, 2)
    assert paired(a, b) == paired(a, b.sample(frac=1.0, random_state=0))


def test_mismatched_prompts_fail_loudly():
    a, b = pair_from_counts(5, 3, 10, 2)
    with pytest.raises(OutcomeError, match="different prompts"):
        paired(a, b.drop(index=b.index[0]))
    with pytest.raises(OutcomeError, match="differ in length"):
        paired([True, False], [True])


def test_load_outcomes_needs_checkpoint_when_file_holds_two(tmp_path):
    p = tmp_path / "both.csv"
    p.write_text("id,family,passed,checkpoint\nq1,caps,true,s3\nq1,caps,false,s4\n")
    with pytest.raises(OutcomeError, match="pass checkpoint="):
        load_outcomes(p)
    assert paired(load_outcomes(p, checkpoint="s3"), load_outcomes(p, checkpoint="s4")).lost == 1
    (tmp_path / "nofam.csv").write_text("id,passed\nq1,true\n")
    with pytest.raises(OutcomeError, match=r"nofam.csv:2: missing \['family'\]"):
        load_outcomes(tmp_path / "nofam.csv")


def test_compare_refuses_disagreeing_families():
    a = pd.DataFrame({"id": ["x", "y"], "family": ["caps", "count"], "passed": [True, False]})
    b = a.assign(family=["caps", "words"])
    with pytest.raises(OutcomeError, match="'y'"):
        compare(a, b)


def test_power_functions_agree():
    n = prompts_needed(0.03, 0.18)
    assert power(n, 0.03, 0.18) >= 0.8 > power(n - 50, 0.03, 0.18)
    assert abs(power_exact(n, 0.03, 0.18) - 0.8) < 0.04
    assert detectable_delta(n, 0.18) == pytest.approx(0.03, abs=2e-4)


def test_grid_table_rebuilds_card_rows():
    "Per-prompt outcomes realising two of the card's grid cells give back their fixed/lost and sign p."
    # prompts 0-19: the incumbent passes, v741 fails (lost); 20-32: the reverse (fixed); 33-399: both pass
    n = 400
    idx = [f"q{i:03d}" for i in range(n)]
    incumbent = pd.Series([i < 20 or i >= 33 for i in range(n)], index=idx)
    v741 = pd.Series([i >= 20 for i in range(n)], index=idx)
    g = grid_table([{"cell": "v741", "mix": "v6x1", "steps": 400, "init": "parent"}], {"v741": v741}, incumbent)
    assert g.loc[0, "fixed/lost"] == "13/20"
    assert round(g.loc[0, "p"], 3) == 0.296
    assert round(g.loc[0, "delta"], 4) == -0.0175  # at n = 400, the card's delta follows


def test_candidates_table_pools_disjoint_instruments():
    h6a, h6b = pair_from_counts(37, 36, 700, 27, prefix="h6-")
    p2a, p2b = pair_from_counts(102, 83, 773, 242, prefix="p2-")
    t = candidates_table({"h6": h6a, "probe2": p2a}, {"v749": {"h6": h6b, "probe2": p2b}})
    row = t.loc[("v749", "pooled: h6+probe2")]
    assert (row["fixed"], row["lost"]) == (139, 119)
    assert row["p"] == pytest.approx(sign_test(139, 119))


def test_family_grid_shape():
    inc = pd.DataFrame({"id": list("abcd"), "family": ["f", "f", "g", "g"], "passed": [True, False, True, False]})
    cand = inc.assign(passed=[True, True, False, False])
    m = family_grid({"c1": cand}, inc)
    assert m.loc["c1", "f"] == 0.5 and m.loc["c1", "g"] == -0.5 and m.loc["c1", ALL] == 0.0


# ---- properties ----
counts = st.integers(min_value=0, max_value=400)


@settings(max_examples=200, deadline=None)
@given(counts, counts)
def test_sign_test_is_a_symmetric_probability(f, l):
    p = sign_test(f, l)
    assert 0.0 <= p <= 1.0
    assert p == sign_test(l, f)
    if f == l:
        assert p == 1.0


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 60), st.integers(0, 60))
def test_sign_test_decreases_as_evidence_grows(f, l):
    if f > l:
        assert sign_test(f + 1, l) <= sign_test(f, l)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=200))
def test_paired_counts_partition_prompts(pairs):
    a = {f"p{i}": u for i, (u, _) in enumerate(pairs)}
    b = {f"p{i}": v for i, (_, v) in enumerate(pairs)}
    r = paired(a, b)
    assert r.fixed + r.lost + r.tied + r.tied_fail == r.n == len(pairs)
    assert r.delta == pytest.approx(r.rate_b - r.rate_a)
    assert r.se >= 0 and 0 <= r.p <= 1
    swapped = paired(b, a)
    assert (swapped.fixed, swapped.lost, swapped.p) == (r.lost, r.fixed, r.p)
    assert r.se == pytest.approx(paired_se(r.n, r.fixed, r.lost))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=60),
       st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=60))
def test_pooling_disjoint_instruments_equals_reading_them_together(x, y):
    ax, bx = {f"x{i}": u for i, (u, _) in enumerate(x)}, {f"x{i}": v for i, (_, v) in enumerate(x)}
    ay, by = {f"y{i}": u for i, (u, _) in enumerate(y)}, {f"y{i}": v for i, (_, v) in enumerate(y)}
    pl = pool({"x": (ax, bx), "y": (ay, by)})
    together = paired({**ax, **ay}, {**bx, **by})
    assert (pl.n, pl.fixed, pl.lost, pl.p) == (together.n, together.fixed, together.lost, together.p)
    assert pl.se == pytest.approx(together.se)
