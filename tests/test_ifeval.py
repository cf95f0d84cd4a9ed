"The ifeval-check contract (DESIGN.md) and its bad-input errors."
import json
import pytest
from rsi_repro.ifeval import check_jsonl, IFEvalInputError, IFEvalArgError, UnknownInstructionError

ROW = {"key": 7, "prompt": "Write.", "instruction_id_list": ["punctuation:no_comma", "length_constraints:number_words"],
       "kwargs": [{"num_words": None}, {"num_words": 3, "relation": "at least"}], "response": "one two, three"}

def write(tmp_path, lines):
    p = tmp_path / "in.jsonl"
    p.write_text("".join(l + "\n" for l in lines), encoding="utf-8")
    return p

def test_contract_fields_and_values(tmp_path):
    out = tmp_path / "out.jsonl"
    acc = check_jsonl(write(tmp_path, [json.dumps(ROW)]), out)
    (row,) = [json.loads(l) for l in out.read_text().splitlines()]
    assert row == {"key": 7, "follow_instruction_list_strict": [False, True], "follow_instruction_list_loose": [False, True],
                   "follow_all_instructions_strict": False, "follow_all_instructions_loose": False}
    assert acc["inst_level_strict_acc"] == 0.5 and acc["prompt_level_strict_acc"] == 0.0

@pytest.mark.parametrize("line, err, msg", [
    ("{not json", IFEvalInputError, "in.jsonl:2: malformed JSON"),
    ("[1, 2]", IFEvalInputError, "in.jsonl:2: a row must be a JSON object"),
    (json.dumps({k: v for k, v in ROW.items() if k != "response"}), IFEvalInputError, "in.jsonl:2: missing field 'response'"),
    (json.dumps({**ROW, "instruction_id_list": ["punctuation:no_semicolon"], "kwargs": [{}]}), UnknownInstructionError, "in.jsonl:2: unknown IFEval instruction id 'punctuation:no_semicolon'"),
    (json.dumps({**ROW, "kwargs": [{}, {"num_words": 3}]}), IFEvalArgError, r"in.jsonl:2: instruction 'length_constraints:number_words' is missing kwarg\(s\) \['relation'\]"),
    (json.dumps({**ROW, "kwargs": [{}, {"num_words": 0, "relation": "at least"}]}), IFEvalArgError, "in.jsonl:2: .*'num_words'=0"),
    (json.dumps({**ROW, "kwargs": [{}]}), IFEvalArgError, "in.jsonl:2: 2 instruction ids but 1 kwargs"),
    ("", IFEvalInputError, "in.jsonl:2: empty line"),
])
def test_bad_rows_name_file_and_line(tmp_path, line, err, msg):
    out = tmp_path / "out.jsonl"
    with pytest.raises(err, match=msg):
        check_jsonl(write(tmp_path, [json.dumps(ROW), line, json.dumps(ROW)]), out)
    assert not out.exists()  # nothing half-written
