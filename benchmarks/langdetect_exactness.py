"""langdetect_exact against langdetect itself, text by text, on every distinct text of the checker benchmark.

The texts are benchmarks/checker.py's: N responses (N / 25 per IFEval id, seeded) and all their loose-scoring variants,
each distinct non-blank text once. For each one:
- langdetect's probability vector (`Detector.langprob`, the factory seeded as IFEval seeds it) against both of
  `langdetect_exact`'s paths, the lockstep batch (`language_probabilities`) and one text at a time
  (`text_probabilities`), compared bit for bit (`==` on the Python floats);
- a text without n-gram features, where langdetect raises and ours gives no rows, counted on both sides;
- the capital-word bounds (`capital_word_bounds`, which decide most capital-word checks without tokenising) against
  the count of `isupper()` tokens of the Treebank tokenisation the reference counts with.
Writes benchmarks/results/langdetect_exactness_python3.X.json (the arithmetic follows the interpreter's: one file per
Python). It times nothing; benchmarks/checker.py measures speed.      Usage: python benchmarks/langdetect_exactness.py [N]
"""
import json, platform, sys, time
from importlib.metadata import version
from pathlib import Path

from langdetect import detector_factory
from langdetect.lang_detect_exception import LangDetectException

from rsi_repro.ifeval import INSTRUCTIONS, capital_word_bounds, loose_variants, sample_cases
from rsi_repro.ifeval_checks import word_tokenize
from rsi_repro.langdetect_exact import language_probabilities, ngram_rows, profile, text_probabilities


def benchmark_texts(n_total: int, seed: int) -> tuple[int, list[str]]:
    """(responses, distinct texts): checker.py's responses and every loose variant of each, in first-seen order; a blank
    variant is left out (no check asks langdetect or counts capitals in one)."""
    per_id = n_total // len(INSTRUCTIONS)
    rows = [r for iid in INSTRUCTIONS for r in sample_cases(iid, per_id, seed)]
    return len(rows), list(dict.fromkeys(v for r in rows for v in loose_variants(r["response"]) if v.strip()))


def langdetect_probabilities(text: str, seed: int = 0) -> list[float] | None:
    "langdetect's own probability vector for `text`, None where it raises (no features)."
    d = detector_factory._factory.create()
    d.seed = seed
    d.append(text)
    try: d.get_probabilities()
    except LangDetectException: return None
    return d.langprob


def main(n_total: int = 20000, seed: int = 0, out: Path | None = None) -> dict:
    t0 = time.perf_counter()
    profile()                                            # loads langdetect's factory
    responses, texts = benchmark_texts(n_total, seed)
    rows = [ngram_rows(t) for t in texts]
    live = [i for i, r in enumerate(rows) if r]
    batch = dict(zip(live, language_probabilities([rows[i] for i in live], 0)))
    theirs_none = ours_none = differ_batch = differ_one = bounds_broken = 0
    for i, text in enumerate(texts):
        if i % 10000 == 0: print(f"{i:,} of {len(texts):,} texts compared, {time.perf_counter() - t0:.0f} s", flush=True)
        theirs = langdetect_probabilities(text)
        theirs_none += theirs is None; ours_none += not rows[i]
        if (theirs is None) != (not rows[i]): differ_batch += 1; differ_one += 1; continue
        if theirs is not None:
            differ_batch += batch[i].tolist() != theirs
            differ_one += text_probabilities(rows[i], 0).tolist() != theirs
        least, most = capital_word_bounds(text)
        bounds_broken += not least <= sum(1 for w in word_tokenize(text) if w.isupper()) <= most
    res = {"responses": responses, "seed": seed, "distinct_texts": len(texts), "with_features": len(texts) - theirs_none,
           "without_features": theirs_none, "without_features_ours": ours_none,
           "probabilities_differing_batch": differ_batch, "probabilities_differing_one_at_a_time": differ_one,
           "capital_word_bounds_broken": bounds_broken, "seconds": round(time.perf_counter() - t0, 1),
           "versions": {"python": platform.python_version(), "langdetect": version("langdetect"), "nltk": version("nltk"),
                        "numpy": version("numpy")}}
    print(json.dumps(res, indent=2))
    out = out or Path(__file__).parent / "results" / f"langdetect_exactness_python{sys.version_info[0]}.{sys.version_info[1]}.json"
    out.write_text(json.dumps(res, indent=2) + "\n")
    return res


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
