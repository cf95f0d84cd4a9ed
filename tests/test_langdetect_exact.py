"rsi_repro.langdetect_exact against langdetect itself (seed 0), offline: answers and probability vectors, bit for bit."
import random
import langdetect
from langdetect import DetectorFactory, detector_factory
from langdetect.lang_detect_exception import LangDetectException
from hypothesis import given, settings, strategies as st, HealthCheck
from rsi_repro.ifeval import INSTRUCTIONS, sample_cases, loose_variants
from rsi_repro.langdetect_exact import detect_many, ngram_rows, language_probabilities

DetectorFactory.seed = 0

def reference(text):
    "(answer, langprob) from langdetect's own Detector; (None, None) where it raises."
    d = detector_factory._factory.create(); d.append(text)
    try: return d.detect(), d.langprob
    except LangDetectException: return None, None

def check(texts):
    ours = detect_many(texts)
    ref = [reference(t) for t in texts]
    assert ours == [a for a, _ in ref]
    live = [(t, p) for t, (_, p) in zip(texts, ref) if p is not None]
    probs = language_probabilities([ngram_rows(t) for t, _ in live])
    for (t, p), q in zip(live, probs): assert q.tolist() == p, t

def test_generated_responses_and_their_variants():
    rng = random.Random(11)
    rows = [r for iid in INSTRUCTIONS for r in sample_cases(iid, 12, seed=3)]
    texts = list(dict.fromkeys(v for r in rows for v in loose_variants(r["response"]) if v.strip()))
    check(rng.sample(texts, 250))

SCRIPTS = ["The quick brown fox", "Le chat dort", "Der Hund schläft", "El perro corre", "Собака спит", "猫は寝ています",
           "कुत्ता सो रहा है", "고양이가 잔다", "القط نائم", "Tiếng Việt có dấu", "NASA AND NYC", "http://example.org/x", "a@b.com",
           "12,345.6", "***", "\n\n", " ", "ÉTÉ", "ǅ", "İ", "ß", "Ω", "e\u0301", "!?"]

@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(SCRIPTS), max_size=12).map(" ".join), st.text(max_size=40))
def test_free_text_in_mixed_scripts(joined, noise):
    check([joined, joined + noise, noise])

def test_empty_batch_and_no_features():
    assert detect_many([]) == []
    assert detect_many(["", "123 !!"]) == [None, None]

def test_self_check_catches_a_different_computation(monkeypatch):
    import pytest
    from rsi_repro import langdetect_exact as lx
    assert lx.self_check.__wrapped__(0)
    gauss = lx._gauss_pair
    monkeypatch.setattr(lx, "_gauss_pair", lambda words, p: tuple(z * (1 + 1e-15) for z in gauss(words, p)))
    with pytest.raises(lx.LangdetectMismatch, match="differs from langdetect"):
        lx.self_check.__wrapped__(0)

@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300), min_size=1, max_size=60))
def test_python_sum_is_this_interpreters_sum(values):
    import numpy as np
    from rsi_repro.langdetect_exact import python_sum
    assert python_sum(np.array(values)) == sum(values)
    assert python_sum(np.array([values, values[::-1]])).tolist() == [sum(values), sum(values[::-1])]

def test_compensated_sum_probe_matches_the_interpreter():
    import sys
    from rsi_repro.langdetect_exact import COMPENSATED_SUM
    assert COMPENSATED_SUM == (sys.version_info >= (3, 12))  # CPython 3.12 made float `sum` compensated

def test_fast_path_holds_here_and_a_mismatch_falls_back_to_langdetect_with_one_warning(monkeypatch):
    import warnings
    from rsi_repro import langdetect_exact as lx
    assert lx.exact_path(0)  # on every Python CI tests, the vectorised path is exact
    texts = ["The cat sleeps on the chair.", "Le chat dort sur la chaise.", "Der Hund schläft im Garten.", "ok", "123 !!",
             "Собака спит в саду.", "猫は椅子の上で寝ています。", "El perro corre en el parque.", "I LOVE NYC", "river stone"]
    gauss = lx._gauss_pair
    monkeypatch.setattr(lx, "_gauss_pair", lambda words, p: tuple(z * (1 + 1e-15) for z in gauss(words, p)))
    lx.self_check.cache_clear(); lx.exact_path.cache_clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert detect_many(texts) == [reference(t)[0] for t in texts]
            assert detect_many(texts[:2]) == [reference(t)[0] for t in texts[:2]]
        assert len(caught) == 1 and "langdetect itself" in str(caught[0].message), [str(w.message) for w in caught]
    finally:
        monkeypatch.undo(); lx.self_check.cache_clear(); lx.exact_path.cache_clear()


def test_the_exactness_benchmark_counts_every_distinct_text_and_finds_no_difference(tmp_path):
    """benchmarks/langdetect_exactness.py (the source of RESULTS.md's exactness counts) on a small draw: every distinct
    non-blank text of the responses and their loose variants counted once, split into texts with and without n-gram
    features the same way on both sides, and no probability vector or capital-word bound differs."""
    import importlib.util, json
    from pathlib import Path
    from rsi_repro.ifeval import INSTRUCTIONS, loose_variants, sample_cases
    spec = importlib.util.spec_from_file_location('lx', Path(__file__).resolve().parents[1] / 'benchmarks' / 'langdetect_exactness.py')
    lx = importlib.util.module_from_spec(spec); spec.loader.exec_module(lx)
    res = lx.main(2 * len(INSTRUCTIONS), seed=3, out=tmp_path / 'x.json')
    rows = [r for iid in INSTRUCTIONS for r in sample_cases(iid, 2, 3)]
    texts = {v for r in rows for v in loose_variants(r['response']) if v.strip()}
    assert res == json.loads((tmp_path / 'x.json').read_text()) and res['responses'] == len(rows)
    assert res['distinct_texts'] == len(texts) == res['with_features'] + res['without_features'] > len(rows)
    assert res['without_features'] == res['without_features_ours']
    assert res['probabilities_differing_batch'] == res['probabilities_differing_one_at_a_time'] == res['capital_word_bounds_broken'] == 0
