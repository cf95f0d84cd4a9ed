"Our IFEval checker against the reference (lm-eval's vendored copy), offline, on generated responses."
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from rsi_repro.ifeval import INSTRUCTIONS, sample_cases, score, reference_scorer

ref = reference_scorer()  # lm-eval is a test dependency: an ImportError here is a real failure

@pytest.mark.parametrize("iid", sorted(INSTRUCTIONS))
def test_same_verdicts_as_reference_on_generated_rows(iid):
    rows = sample_cases(iid, 150, seed=7)
    for r in rows:
        ours, theirs = score(r["instruction_id_list"], r["kwargs"], r["response"]), ref(r)
        assert (ours.strict, ours.loose) == (theirs.strict, theirs.loose), r
    # the generated rows must exercise both verdicts, or agreement says little
    assert any(score(r["instruction_id_list"], r["kwargs"], r["response"]).all_loose for r in rows), iid

PIECES = ["*", "**", "***", "******", "-", "---", "\n", "\n\n", " ", ",", ".", "!", "?", '"', "[x]", "[]", "<<t>>",
          "P.S.", "p. p. s", "Section 2", "My answer is yes.", "Dr.", "CAT", "cat", "category", "I", "river", "Any other questions?",
          '{"a": 1}', "```json", "```", "le chat dort", "ÉTÉ", "3.5"]
FIXED_KWARGS = {  # one legal kwargs dict per id for the free-text property
    "keywords:existence": {"keywords": ["cat"]}, "keywords:frequency": {"keyword": "cat", "frequency": 2, "relation": "at least"},
    "keywords:forbidden_words": {"forbidden_words": ["cat"]}, "keywords:letter_frequency": {"letter": "e", "let_frequency": 2, "let_relation": "less than"},
    "language:response_language": {"language": "en"}, "length_constraints:number_sentences": {"num_sentences": 2, "relation": "less than"},
    "length_constraints:number_paragraphs": {"num_paragraphs": 2}, "length_constraints:number_words": {"num_words": 4, "relation": "at least"},
    "length_constraints:nth_paragraph_first_word": {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "cat"},
    "detectable_content:number_placeholders": {"num_placeholders": 1}, "detectable_content:postscript": {"postscript_marker": "P.P.S"},
    "detectable_format:number_bullet_lists": {"num_bullets": 1}, "detectable_format:number_highlighted_sections": {"num_highlights": 1},
    "detectable_format:multiple_sections": {"section_spliter": "Section", "num_sections": 1}, "combination:repeat_prompt": {"prompt_to_repeat": "cat"},
    "startend:end_checker": {"end_phrase": "Any other questions?"}, "change_case:capital_word_frequency": {"capital_frequency": 2, "capital_relation": "at least"},
}

@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), max_size=25).map("".join))
def test_same_verdicts_as_reference_on_free_text(text):
    for iid in INSTRUCTIONS:
        row = {"key": 0, "prompt": "p", "instruction_id_list": [iid], "kwargs": [FIXED_KWARGS.get(iid, {})], "response": text}
        ours, theirs = score(row["instruction_id_list"], row["kwargs"], text), ref(row)
        assert (ours.strict, ours.loose) == (theirs.strict, theirs.loose), (iid, text)

def test_ifeval_check_agrees_with_the_reference_through_the_fast_path(tmp_path, monkeypatch):
    "`rsi-repro ifeval-check` on generated responses for every id gives the reference's verdicts on this Python, with the"
    "vectorised langdetect path (its self-check passes; langdetect's own per-text detector is never asked)."
    import contextlib, io, json
    from rsi_repro import langdetect_exact as lx
    from rsi_repro.cli import main
    lx.exact_path.cache_clear()
    def refuse(*a, **k): raise AssertionError("fell back to langdetect itself")
    monkeypatch.setattr(lx, "langdetect_one", refuse)
    rows = [r for iid in sorted(INSTRUCTIONS) for r in sample_cases(iid, 40, seed=5)]
    for i, r in enumerate(rows): r["key"] = i
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["ifeval-check", str(src), "-o", str(out)]) == 0
    assert lx.exact_path(0)
    verdicts = [json.loads(l) for l in out.read_text().splitlines()]
    assert len(verdicts) == len(rows)
    for r, v in zip(rows, verdicts):
        theirs = ref(r)
        assert (tuple(v["follow_instruction_list_strict"]), tuple(v["follow_instruction_list_loose"])) == (theirs.strict, theirs.loose), r
    language_ids = {"language:response_language", "change_case:english_capital", "change_case:english_lowercase"}
    assert language_ids <= {i for r in rows for i in r["instruction_id_list"]}  # the ids that ask langdetect are covered
