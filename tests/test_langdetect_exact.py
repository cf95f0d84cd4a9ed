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
