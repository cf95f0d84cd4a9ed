"Pools: committed hashes, the audit catches planted overlaps, bad pool files name the row."
import json
from pathlib import Path

import pytest
import yaml
from rsi_repro.config import load_profile
from rsi_repro.constraints import EXTRA_FAMILIES, H6_FAMILIES, PROBE2_FAMILIES
from rsi_repro.pools import (build_pools, audit, pool_sha256, write_pool, read_pool, values_for, GRIDS,
                             PoolOverlapError, PoolDataError, PoolBuildError)

ARGS = dict(seed=0, h6_size=130, probe2_size=65, rounds={"r5": 60, "r6": 60}, second_constraint_prob=0.3)
# Committed: a change here means every pool built from the same seed changes. Update only on purpose.
# (h6 changed on purpose when H6 became the card's twelve families; probe2, r5, r6 did not change.)
EXPECTED = {"h6": "7361d11fbc5fd253c1ba0843fe5021a872c85c68db34737a73862c969e450840",
            "probe2": "a36a34db949c56e358c25fe8c2b6c8c07ca5d51d04694d900390878376ca2f51",
            "r5": "87992b89892a8732b389715bc592c3b7deeafa6d14b3ed45d81916799972070e",
            "r6": "01b90c4a89380c61a32dd833be7d89dc57bf70bd04da36ab0804b488306899d4"}

@pytest.fixture(scope="module")
def pools(): return build_pools(**ARGS)

def test_hashes_are_the_committed_ones(pools):
    assert {k: pool_sha256(v) for k, v in pools.items()} == EXPECTED

def test_other_seed_other_pools():
    assert pool_sha256(build_pools(**{**ARGS, "seed": 1})["h6"]) != EXPECTED["h6"]

def test_value_roles_are_disjoint_and_cover_the_grid():
    for fam, g in GRIDS.items():
        sets = {role: {v for v, _ in values_for(fam, role)} for role in ("train", "eval", "edge")}
        assert not (sets["train"] & sets["eval"]) and not (sets["train"] & sets["edge"]) and not (sets["eval"] & sets["edge"])
        assert sets["train"] | sets["eval"] | sets["edge"] == set(range(g.lo, g.hi + 1, g.step))

def test_audit_passes_clean_pools(pools):
    assert audit(pools)["pairs_checked"] > 0

@pytest.mark.parametrize("plant, msg", [
    (lambda P: {**P, "r5": P["r5"] + [{**P["r5"][0], "id": "r5-x", "prompt": "new", "subject": P["probe2"][0]["subject"]}]}, "'probe2' and 'r5' share 1 subject"),
    (lambda P: {**P, "r6": P["r6"] + [{**P["r6"][0], "id": "r6-x", "prompt": "new", "template_id": P["h6"][0]["template_id"]}]}, "'h6' and 'r6' share 1 template"),
    (lambda P: {**P, "r5": P["r5"] + [{**P["r5"][0], "id": "r5-x", "prompt": "new", "constraints": [{"id": "paragraphs", "kwargs": {"n": 6}}]}]}, r"'h6' and 'r5' share 1 \(family, value\)"),
    (lambda P: {**P, "r6": P["r6"] + [{**P["r5"][0], "id": "r6-x"}]}, "'r5' and 'r6' share 1 prompt"),
    (lambda P: {**P, "h6": P["h6"] + [P["h6"][3]]}, "pool 'h6': duplicate id at rows 3 and 130"),
])
def test_audit_catches_planted_overlap(pools, plant, msg):
    with pytest.raises(PoolOverlapError, match=msg): audit(plant(pools))

def test_write_read_roundtrip_and_bad_rows(pools, tmp_path):
    p = tmp_path / "r5.jsonl"
    assert write_pool(pools["r5"], p) == EXPECTED["r5"]
    assert read_pool(p) == pools["r5"]
    lines = p.read_text().splitlines()
    (tmp_path / "dup.jsonl").write_text("\n".join(lines[:3] + [lines[1]]) + "\n")
    with pytest.raises(PoolDataError, match=r"dup.jsonl:4: duplicate id 'r5-00001' \(first on line 2\)"): read_pool(tmp_path / "dup.jsonl")
    bad = json.loads(lines[0]); bad["constraints"] = [{"id": "max_words", "kwargs": {}}]
    (tmp_path / "bad.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(PoolDataError, match="bad.jsonl:1: row 'r5-00000'.*missing parameter"): read_pool(tmp_path / "bad.jsonl")
    (tmp_path / "junk.jsonl").write_text(lines[0] + "\n{oops\n")
    with pytest.raises(PoolDataError, match="junk.jsonl:2: malformed JSON"): read_pool(tmp_path / "junk.jsonl")

def test_pool_too_large_for_its_material_fails_loudly():
    with pytest.raises(PoolBuildError, match="could not draw a new prompt"):
        build_pools(**{**ARGS, "probe2_size": 200000, "rounds": {}})


ROOT = Path(__file__).resolve().parents[1]
# The card's list, in its words: "paragraphs +24, repeat +14, no-comma +9, highlight +6, max-words +5, max-sentences +4,
# min-bullets +3, min-words +3, min-sentences +2 ... lowercase -2, uppercase -2, bullets -1" ("twelve constraint families").
CARD_H6 = ["paragraphs", "repeat", "no-comma", "highlight", "max-words", "max-sentences", "min-bullets", "min-words",
           "min-sentences", "lowercase", "uppercase", "bullets"]
CARD_TO_ID = {"highlight": "highlights"}   # the card's name -> this library's id; otherwise "-" becomes "_"


def card_ids(names): return {CARD_TO_ID.get(n, n.replace("-", "_")) for n in names}


def test_h6_families_are_the_cards_twelve():
    claims = {c["id"]: c for c in yaml.safe_load((ROOT / "data/claims/seed_card.yaml").read_text())["claims"]}
    assert list(claims["h6_family_nets"]["values"]) == CARD_H6      # the claims file transcribes the card's list
    assert len(H6_FAMILIES) == 12 and set(H6_FAMILIES) == card_ids(CARD_H6)
    assert set(PROBE2_FAMILIES) - set(H6_FAMILIES) == {"placeholders"}   # the card's v749 probe2 read has a placeholders family


def test_nemotron_pools_h6_has_the_cards_twelve_and_probe2_1200():
    p = load_profile(ROOT / "configs/nemotron.yaml", check_files=False).pools
    assert (p.h6_size, p.probe2_size) == (1600, 1200)
    P = build_pools(seed=p.seed, h6_size=p.h6_size, probe2_size=p.probe2_size, rounds={"r5": 200},
                    second_constraint_prob=p.second_constraint_prob)
    assert {r["families"][0] for r in P["h6"]} == card_ids(CARD_H6)
    assert {r["families"][0] for r in P["probe2"]} == card_ids(CARD_H6) | {"placeholders"}
    assert {r["families"][0] for r in P["r5"]} == set(H6_FAMILIES + EXTRA_FAMILIES)   # training keeps every family
