"Property tests for the study's own constraint families: built-to-pass texts pass, a minimal change fails."
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from rsi_repro.constraints import (CONSTRAINTS, Constraint, compose, get_spec, conflict_table,
                                   ConstraintArgError, ConstraintConflictError, UnknownConstraintError)

FILLER = ["river", "stone", "light", "quiet", "market", "garden", "winter", "paper", "signal", "harbor",
          "orange", "window", "valley", "copper", "thread", "meadow", "lantern", "ribbon", "pocket", "engine"]
word = st.sampled_from(FILLER)
words = st.lists(word, min_size=2, max_size=8)
sentence = words.map(lambda ws: " ".join(ws) + ".")
settings.register_profile("fast", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("fast")

def sents(k, draw): return [draw(sentence) for _ in range(k)]

@st.composite
def case(draw, family):
    "(kwargs, passing text, minimally perturbed failing text) for one family."
    n = draw(st.integers(1, 8))
    if family == "paragraphs":
        ps = [" ".join(sents(draw(st.integers(1, 3)), draw)) for _ in range(n)]
        good = "\n\n".join(ps)
        return {"n": n}, good, good + "\n\n" + draw(sentence)
    if family == "repeat":
        w = "kestrel"
        body = sents(n + 1, draw)
        good = " ".join(s[:-1] + f" {w}." for s in body[:n]) + " " + body[n]
        return {"word": w, "n": n}, good, good + f" {w.capitalize()}!"
    if family == "no_comma":
        good = " ".join(sents(n, draw))
        return {}, good, good.replace(" ", ", ", 1)
    if family == "highlights":
        good = " ".join(f"*{draw(word)} {draw(word)}* {draw(sentence)}" for _ in range(n))
        i = good.index("*"); j = good.index("*", i + 1)
        return {"n": n}, good, good[:i] + good[i + 1:j] + good[j + 1:]
    if family in ("max_words", "min_words"):
        ws = [draw(word) for _ in range(n + 2)]
        good = " ".join(ws) + "."
        return ({"n": n + 2}, good, good[:-1] + " " + draw(word) + ".") if family == "max_words" else \
               ({"n": n + 2}, good, " ".join(ws[1:]) + ".")
    if family in ("max_sentences", "min_sentences"):
        ss = sents(n + 1, draw)
        good = " ".join(ss)
        return ({"n": n + 1}, good, good + " " + draw(sentence)) if family == "max_sentences" else \
               ({"n": n + 1}, good, " ".join(ss[1:]))
    if family in ("min_bullets", "bullets"):
        lines = [f"* {draw(sentence)}" for _ in range(n)]
        good = draw(sentence) + "\n" + "\n".join(lines)
        return ({"n": n}, good, good.rsplit("\n", 1)[0]) if family == "min_bullets" else \
               ({"n": n}, good, good + "\n- " + draw(sentence))
    if family == "lowercase":
        good = " ".join(sents(n, draw))
        return {}, good, good[0].upper() + good[1:]
    if family == "uppercase":
        good = " ".join(sents(n, draw)).upper()
        return {}, good, good[0].lower() + good[1:]
    if family == "placeholders":
        good = " ".join(f"{draw(sentence)[:-1]} [{draw(word)}]." for _ in range(n))
        i = good.index("["); j = good.index("]")
        return {"n": n}, good, good[:i] + good[i + 1:j] + good[j + 1:]
    if family == "no_digits":
        good = " ".join(sents(n, draw))
        return {}, good, good[:-1] + " 7."
    if family == "quotes":
        good = '"' + " ".join(sents(n, draw)) + '"'
        return {}, good, good[:-1]
    if family == "postscript":
        m = draw(st.sampled_from(["P.S.", "P.P.S."]))
        good = " ".join(sents(n, draw)) + f"\n\n{m} " + draw(sentence)
        return {"marker": m}, good, good + "\n\n" + draw(sentence)
    raise AssertionError(family)

@pytest.mark.parametrize("family", sorted(CONSTRAINTS))
def test_built_text_passes_and_perturbation_fails(family):
    spec = get_spec(family)
    @given(case(family))
    def prop(c):
        kw, good, bad = c
        assert spec.check(good, **kw), (spec.count(good, **kw), good)
        assert not spec.check(bad, **kw), (spec.count(bad, **kw), bad)
    prop()

@st.composite
def any_kwargs(draw, spec):
    kw = {}
    for p in spec.params:
        if p.kind is int: kw[p.name] = draw(st.integers(p.minimum, min(p.maximum, 30)))
        elif p.choices: kw[p.name] = draw(st.sampled_from(p.choices))
        else: kw[p.name] = draw(word)
    return kw

texty = st.lists(st.sampled_from(list("abcXYZ ,.!?*-[]\"“”\n\t0123") + ["P.S.", "river", "* ", "\n\n", "**"]), max_size=80).map("".join)

@pytest.mark.parametrize("family", sorted(CONSTRAINTS))
def test_count_and_check_never_disagree(family):
    spec = get_spec(family)
    @given(texty, any_kwargs(spec))
    def prop(text, kw):
        assert spec.check(text, **kw) == (bool(text.strip()) and spec.verdict(spec.count(text, **kw), **kw))
    prop()

def test_bad_input_names_the_problem():
    with pytest.raises(UnknownConstraintError, match="'maxwords'"): get_spec("maxwords")
    with pytest.raises(ConstraintArgError, match="repeat.*missing parameter.*'word'"): get_spec("repeat").check("x", n=2)
    with pytest.raises(ConstraintArgError, match="'word' must match"): get_spec("repeat").check("x", word="two words", n=2)
    with pytest.raises(ConstraintArgError, match="must be an int"): get_spec("bullets").check("x", n=True)
    with pytest.raises(ConstraintConflictError, match="uppercase.*lowercase|lowercase.*uppercase"):
        compose([Constraint("uppercase"), Constraint("lowercase")])
    with pytest.raises(ConstraintConflictError, match="exactly n bullets"):
        compose([Constraint("bullets", {"n": 2}), Constraint("min_bullets", {"n": 3})])

def test_conflict_table_rows_are_real_conflicts():
    assert {r["a"] for r in conflict_table()} <= set(CONSTRAINTS)
    assert all(r["why"] for r in conflict_table())
