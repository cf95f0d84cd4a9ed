"`rsi-repro ifeval-check` on rows like the official set's: non-letter letters, unscorable rows, the printed summary."
import contextlib, io, json
import pytest
from rsi_repro.cli import main

CONTRACT = {"key", "follow_instruction_list_strict", "follow_instruction_list_loose",
            "follow_all_instructions_strict", "follow_all_instructions_loose"}

# Each letter row is decisive: counted literally it passes ('#') or passes its first instruction ('!'), while any
# random letter (what the reference substitutes) occurs fewer times than asked and would fail.
ROWS = [
    {"key": 1, "prompt": "p", "instruction_id_list": ["keywords:letter_frequency"],
     "kwargs": [{"letter": "#", "let_frequency": 2, "let_relation": "at least"}], "response": "### ###"},
    {"key": 2, "prompt": "p", "instruction_id_list": ["keywords:letter_frequency", "punctuation:no_comma"],
     "kwargs": [{"letter": "!", "let_frequency": 3, "let_relation": "at least"}, {}], "response": "Wow!!! Great, yes"},
    {"key": 3, "prompt": "p", "instruction_id_list": ["startend:quotation"], "kwargs": [{}], "response": '"Hello"\nBye'},
    {"key": 4, "prompt": "p", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}], "response": "no commas"},
]
# By hand: strict verdicts [T], [T, F], [F], [T]; loose [T], [T, F], [T], [T].
EXPECTED = {"prompt_level_strict_acc": 2 / 4, "inst_level_strict_acc": 3 / 5,
            "prompt_level_loose_acc": 3 / 4, "inst_level_loose_acc": 4 / 5}

def run(tmp_path, rows, *extra):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        code = main(["ifeval-check", str(src), "-o", str(out), *extra])
    return code, o.getvalue(), e.getvalue(), out

def test_non_letters_are_counted_literally_and_marked(tmp_path):
    code, printed, err, out = run(tmp_path, ROWS)
    assert code == 0, err
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    assert [r["follow_instruction_list_strict"] for r in rows] == [[True], [True, False], [False], [True]]
    assert [r["follow_instruction_list_loose"] for r in rows] == [[True], [True, False], [True], [True]]
    assert [r["reference_random"] for r in rows[:2]] == [
        [{"index": 0, "instruction_id": "keywords:letter_frequency", "letter": "#", "counted": "literally, case-insensitively"}],
        [{"index": 0, "instruction_id": "keywords:letter_frequency", "letter": "!", "counted": "literally, case-insensitively"}]]
    assert set(rows[2]) == set(rows[3]) == CONTRACT            # rows without a literal letter keep the contract's fields only
    assert all(CONTRACT <= set(r) for r in rows)
    # deterministic: a second run gives the same file byte for byte
    first = out.read_bytes()
    assert run(tmp_path, ROWS)[0] == 0 and out.read_bytes() == first

def test_printed_summary_gives_the_four_accuracies(tmp_path):
    code, printed, _, _ = run(tmp_path, ROWS, "--summary-json", str(tmp_path / "s.json"))
    assert code == 0
    lines = printed.splitlines()
    assert lines[0].startswith("4 prompts, 5 instructions") and "2 row(s) with a letter counted literally" in lines[0]
    assert lines[1].split() == ["strict", "loose"]
    assert lines[2].split() == ["prompt-level", "0.5000", "0.7500"]
    assert lines[3].split() == ["instruction-level", "0.6000", "0.8000"]
    per_id = {l.split()[0]: l.split()[1:] for l in lines[5:]}
    assert per_id["instruction"] == ["id", "n", "strict", "loose"]
    assert per_id["keywords:letter_frequency"] == ["2", "1.0000", "1.0000"]
    assert per_id["punctuation:no_comma"] == ["2", "0.5000", "0.5000"]
    assert per_id["startend:quotation"] == ["1", "0.0000", "1.0000"]
    s = json.loads((tmp_path / "s.json").read_text())
    assert {k: s[k] for k in EXPECTED} == pytest.approx(EXPECTED)
    assert s["n_prompts"] == 4 and s["n_instructions"] == 5 and s["n_skipped"] == 0 and s["n_reference_random"] == 2
    assert s["per_id"]["startend:quotation"] == {"n": 1, "strict": 0.0, "loose": 1.0}

UNSCORABLE = {"key": 9, "prompt": "Repeat me", "instruction_id_list": ["combination:repeat_prompt"], "kwargs": [{}],
              "response": "Repeat me"}

def test_unscorable_row_is_a_per_row_error(tmp_path):
    code, printed, err, out = run(tmp_path, ROWS[:2] + [UNSCORABLE] + ROWS[2:])
    assert code == 2 and not out.exists()
    assert "in.jsonl:3: instruction 'combination:repeat_prompt' is missing kwarg(s) ['prompt_to_repeat']" in err
    assert "--skip-unscorable" in err

def test_skip_unscorable_skips_and_counts(tmp_path):
    unknown = {**UNSCORABLE, "key": 10, "instruction_id_list": ["detectable_content:repeat_prompt"]}
    code, printed, err, out = run(tmp_path, ROWS[:2] + [UNSCORABLE] + ROWS[2:] + [unknown],
                                  "--skip-unscorable", "--summary-json", str(tmp_path / "s.json"))
    assert code == 0, err
    assert [json.loads(l)["key"] for l in out.read_text().splitlines()] == [1, 2, 3, 4]
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["n_skipped"] == 2 and [x["key"] for x in s["skipped"]] == [9, 10]
    assert s["skipped"][0]["where"].endswith("in.jsonl:3") and "prompt_to_repeat" in s["skipped"][0]["error"]
    assert "unknown IFEval instruction id 'detectable_content:repeat_prompt'" in s["skipped"][1]["error"]
    assert {k: s[k] for k in EXPECTED} == pytest.approx(EXPECTED)    # the skipped rows are out of the accuracies
    assert "2 unscorable row(s) skipped" in printed.splitlines()[0]

@pytest.mark.parametrize("letter", ["", "ab", 3])
def test_a_letter_that_is_not_one_character_still_fails(tmp_path, letter):
    bad = {**ROWS[0], "kwargs": [{"letter": letter, "let_frequency": 2, "let_relation": "at least"}]}
    code, _, err, _ = run(tmp_path, [bad])
    assert code == 2 and "kwarg 'letter'" in err


@pytest.mark.parametrize("char", ["#", "!", "É", " "])
def test_literal_count_is_the_reference_count_of_that_character(monkeypatch, char):
    "Where the reference would draw a random letter, make its draw the asked character: the verdicts are then ours."
    from rsi_repro.ifeval import reference_scorer, score
    ref = reference_scorer()
    from lm_eval.tasks.ifeval import instructions as reference
    monkeypatch.setattr(reference.random, "choice", lambda seq: char)
    texts = ["", "# ! É é", "##!! ÉÉ éé  x", "no such characters", "#\n!\nÉ\n" * 3, "!!!!! ##### ééééé     "]
    for n in (1, 2, 3, 5):
        for rel in ("less than", "at least"):
            for text in texts:
                row = {"key": 0, "prompt": "p", "instruction_id_list": ["keywords:letter_frequency"],
                       "kwargs": [{"letter": char, "let_frequency": n, "let_relation": rel}], "response": text}
                ours, theirs = score(row["instruction_id_list"], row["kwargs"], text), ref(row)
                assert (ours.strict, ours.loose) == (theirs.strict, theirs.loose), (char, n, rel, text)
