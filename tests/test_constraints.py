"Property tests for the study's own constraint families: built-to-pass texts pass, a minimal change fails."
import re

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

# Hand-written texts with counts made by hand (the comment says what was counted), one or more per family; each
# also fixes the verdict, so a counter that drifts from the documented rule fails here.
HAND_COUNTED = [
    # family, kwargs, text, count, passes
    ("paragraphs", {"n": 3}, "One para here.\n\nSecond one.\n***\nThird.", 3, True),     # blank line and *** divide
    ("paragraphs", {"n": 3}, "A.\nB.\n\n\n\nC.", 2, False),                           # a single newline does not
    ("repeat", {"word": "cat", "n": 3}, "The cat sat. Category cats? CAT! cat-like cat", 4, False),  # cat CAT cat(-like) cat
    ("no_comma", {}, "Apples, pears，and plums", 2, False),                           # ',' and full-width '，'
    ("no_comma", {}, "No commas here.", 0, True),
    ("highlights", {"n": 2}, "*one* and **two** but * not this* and\n* a bullet", 2, True),  # *one* **two**
    ("max_words", {"n": 5}, "Don't stop: well-known ideas_2 run", 6, False),          # Don't stop well-known ideas 2 run
    ("min_words", {"n": 6}, "Don't stop: well-known ideas_2 run", 6, True),
    ("max_sentences", {"n": 3}, "Dr. Smith arrived. Was it late?! Yes... e.g. now", 4, False),  # Dr. and e.g. do not end one
    ("min_sentences", {"n": 4}, "Dr. Smith arrived. Was it late?! Yes... e.g. now", 4, True),
    ("bullets", {"n": 4}, "Intro:\n* a\n- b\n  + c\n• d\n*not a bullet\n---\n-e", 4, True),  # * a, - b, + c, • d
    ("min_bullets", {"n": 5}, "Intro:\n* a\n- b\n  + c\n• d\n*not a bullet\n---\n-e", 4, False),
    ("lowercase", {}, "hello World ÉCOLE", 6, False),                                  # W É C O L E
    ("uppercase", {}, "HELLO wORLD 123", 1, False),                                    # w
    ("uppercase", {}, "HELLO, WORLD 123!", 0, True),
    ("placeholders", {"n": 2}, "Send to [address] by [date]; see [docs](http://x.org) and []", 2, True),  # not the link, not []
    ("no_digits", {}, "Call 555-0199 or ٣", 8, False),                                 # seven ASCII digits and one Arabic-Indic
    ("quotes", {}, '  “Hello there.”  ', 1, True),
    ("quotes", {}, '"Hi" he said', 0, False),
    ("postscript", {"marker": "P.S."}, "Body text.\n\nP.S. Call me.", 1, True),
    ("postscript", {"marker": "P.S."}, "P.S. only", 0, False),                         # no body before it
    ("postscript", {"marker": "P.S."}, "Body.\nP.S. one\n\nMore text.", 0, False),     # a paragraph follows it
    ("postscript", {"marker": "P.S."}, "Body.\nP.P.S. x", 0, False),                   # another marker
]

@pytest.mark.parametrize("family,kw,text,count,passes", HAND_COUNTED)
def test_hand_counted_texts(family, kw, text, count, passes):
    spec = get_spec(family)
    assert spec.count(text, **kw) == count
    assert spec.check(text, **kw) is passes

def test_every_family_has_a_hand_counted_text_and_fails_on_blank():
    assert {f for f, *_ in HAND_COUNTED} == set(CONSTRAINTS)
    for family, kw, *_ in HAND_COUNTED:
        assert get_spec(family).check(" \n\t", **kw) is False, family   # a blank answer never passes, even "no commas"

def test_bad_input_names_the_problem():
    with pytest.raises(UnknownConstraintError, match="'maxwords'"): get_spec("maxwords")
    with pytest.raises(ConstraintArgError, match="repeat.*missing parameter.*'word'"): get_spec("repeat").check("x", n=2)
    with pytest.raises(ConstraintArgError, match="'word' must match"): get_spec("repeat").check("x", word="two words", n=2)
    with pytest.raises(ConstraintArgError, match="must be an int"): get_spec("bullets").check("x", n=True)
    with pytest.raises(ConstraintConflictError, match="uppercase.*lowercase|lowercase.*uppercase"):
        compose([Constraint("uppercase"), Constraint("lowercase")])
    with pytest.raises(ConstraintConflictError, match="exactly n bullets"):
        compose([Constraint("bullets", {"n": 2}), Constraint("min_bullets", {"n": 3})])

def _kwargs(family, n):
    "Legal kwargs for `family` with threshold `n` where it takes one."
    kw = {"n": n} if any(p.name == "n" for p in get_spec(family).params) else {}
    if family == "repeat": kw["word"] = "cat"
    if family == "postscript": kw["marker"] = "P.S."
    return kw

@pytest.mark.parametrize("row", conflict_table(), ids=lambda r: f"{r['a']}-{r['b']}")
def test_conflict_table_rows_are_real_conflicts(row):
    a, b = row["a"], row["b"]
    assert {a, b} <= set(CONSTRAINTS)
    # every row's value-dependent conflict is "a's n below b's n" or "two different n": a at 2 and b at 3 conflict
    lo, hi = Constraint(a, _kwargs(a, 2)), Constraint(b, _kwargs(b, 3))
    for pair in ([lo, hi], [hi, lo]):
        with pytest.raises(ConstraintConflictError, match=re.escape(row["why"])): compose(pair)
    if row["when"] == "for some values" and a != b:   # and the same two families with a's n above b's are fine
        assert len(compose([Constraint(a, _kwargs(a, 3)), Constraint(b, _kwargs(b, 2))])) == 2
