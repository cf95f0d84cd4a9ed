"The seed card audit: figures that follow pass, figures that do not are flagged, bad claims files fail loudly."
from pathlib import Path

import pytest

from rsi_repro.card_audit import (CANNOT_CHECK, DOES_NOT_FOLLOW, FOLLOWS, ClaimError, audit_claims, implied_n, printed)

CLAIMS = Path(__file__).resolve().parents[1] / "data" / "claims" / "seed_card.yaml"


@pytest.fixture(scope="module")
def verdicts():
    return audit_claims(CLAIMS).set_index(["claim", "figure"])["verdict"]


def test_every_figure_gets_a_verdict(verdicts):
    assert set(verdicts) <= {FOLLOWS, DOES_NOT_FOLLOW, CANNOT_CHECK}
    assert not verdicts.index.duplicated().any()


@pytest.mark.parametrize("claim", ["h6_1600", "v749_probe2_1200", "chat120_vs_parent", "chat120_vs_older", "blinded_read",
                                   "safety", "multi_turn", "wide_chat_231", "math_rate", "math_se", "se_n400", "se_n800"])
def test_figures_that_follow(verdicts, claim):
    assert (verdicts[claim] == FOLLOWS).all(), verdicts[claim]


@pytest.mark.parametrize("claim,figure", [
    ("probe2_300", "delta = (fixed - lost)/n"),                 # 66/300 = 0.22, not 0.055
    ("probe2_300", "rates realisable at n with these fixed/lost"),
    ("h6_family_nets", "families with a positive net"),       # nine, not ten
    ("h6_family_nets", "sum of family nets = fixed - lost"),  # 65, not 72
    ("v749_pooled", "sign test p on pooled counts"),          # 0.237, not 0.19
    ("v749_se_own_counts", "SE of paired delta"),             # 0.011 from its own 73 discordant prompts
    ("grid_discordance", "share of prompts discordant"),
    ("chat120_split", "total"),                               # 5 + 3 = 8, not nine
    ("v749_probe_delta", "delta matches a reported read"),
    ("v741", "delta = (fixed - lost)/n"),                     # at the stated n = 1600
    ("grid_discordance", "share of prompts discordant at the fitted n"),   # 9%, not 18%
    ("wide_chat_size", "size stated in: open chat (the larger 241-prompt battery)"),   # 241 here, 231 elsewhere
])
def test_figures_that_do_not_follow(verdicts, claim, figure):
    assert verdicts[(claim, figure)] == DOES_NOT_FOLLOW


def test_grid_p_values_all_follow(verdicts):
    for k in range(741, 750):
        assert verdicts[(f"v{k}", "sign test p")] == FOLLOWS


@pytest.mark.parametrize("cell,n_fit", [("v741", 400), ("v742", 375), ("v743", 400), ("v749", 800)])
def test_grid_cells_are_audited_at_the_n_their_figures_fit(verdicts, cell, n_fit):
    table = audit_claims(CLAIMS).set_index(["claim", "figure"])
    assert table.loc[(cell, "n the printed delta fits"), "reported"] == str(n_fit)
    assert verdicts[(cell, "n the printed delta fits")] == FOLLOWS
    assert verdicts[(cell, "delta = (fixed - lost)/n_fit")] == FOLLOWS


def test_v742_fits_only_n_375():
    # -6 prompts (14 fixed / 20 lost) print as -0.0160 at n = 374-376 only; at 400 they would print as -0.0150
    assert implied_n(14 - 20, "-0.0160") == [374, 375, 376]
    assert 400 not in implied_n(14 - 20, "-0.0160")
    assert implied_n(13 - 20, "-0.0175") == [399, 400, 401] and 400 in implied_n(17 - 19, "-0.0050")


def test_pooled_v749_is_p_0237_not_019(verdicts):
    row = audit_claims(CLAIMS).set_index(["claim", "figure"]).loc[("v749_pooled", "sign test p on pooled counts")]
    assert round(float(row["recomputed"]), 3) == 0.237 and row["note"].endswith("p = 0.237")
    assert row["reported"] == "0.19" and row["verdict"] == DOES_NOT_FOLLOW


def test_a_wrong_n_fit_is_flagged_and_a_bad_one_fails(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("claims:\n- {id: g, kind: paired, n: 1600, n_fit: 400, counts: {fixed: 14, lost: 20}, reported: {delta: '-0.0160'}}\n")
    v = audit_claims(p).set_index("figure")["verdict"]
    assert v["n the printed delta fits"] == DOES_NOT_FOLLOW and v["delta = (fixed - lost)/n_fit"] == DOES_NOT_FOLLOW
    p.write_text("claims:\n- {id: g, kind: paired, n: 1600, n_fit: 10, counts: {fixed: 14, lost: 20}, reported: {delta: '-0.0160'}}\n")
    with pytest.raises(ClaimError, match=r"c.yaml: claim 'g': n_fit must be a whole number >= fixed \+ lost = 34"):
        audit_claims(p)


def test_printed_tolerance_and_implied_n():
    assert printed("0.19") == (0.19, 0.005)
    assert implied_n(66, "0.0550") == [1199, 1200, 1201]
    assert implied_n(0, "0.01") == []


def test_bad_claims_files_fail_with_the_claim_named(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("claims:\n- {id: x, kind: paired, counts: {fixed: 1}, reported: {p: '1.0'}}\n")
    with pytest.raises(ClaimError, match=r"c.yaml: claim 'x' \(kind paired\): missing 'lost'"):
        audit_claims(p)
    p.write_text("claims:\n- {id: x, kind: guess, reported: {p: '1'}}\n")
    with pytest.raises(ClaimError, match="unknown kind 'guess'"):
        audit_claims(p)
    p.write_text("claims:\n- {id: x, kind: sum, values: [1], reported: {total: '1'}}\n- {id: x, kind: sum, values: [1], reported: {total: '1'}}\n")
    with pytest.raises(ClaimError, match="appears twice"):
        audit_claims(p)
