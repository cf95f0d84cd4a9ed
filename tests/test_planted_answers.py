"""A model's answer that is markup reaches the results site as text: end to end, from generation to the browser.

The site shows what a model answered (the serve stage's table, among others), and an answer is data like a prompt id:
it must arrive as escaped text, never as an element. `tests/test_pipeline.py` plants markup in prompt ids and texts,
but no trained model can be made to answer with markup on demand (the demo's tiny base rambles). So this test
constructs one: a "bigram" Llama built from `data/tiny_base` (its config and tokenizer) whose attention outputs and
MLP outputs are zeroed, so the hidden state at a position is that token's embedding alone, and whose embedding and
(untied) output rows are set so that greedy decoding after the chat template's assistant header emits exactly
`ANSWER`, an element with an event handler, and then `<|im_end|>`. A small run of that base (`serve`, and the fewest
stages the `report` stage's front page needs) is opened page by page in headless Chromium: the handler never ran, no
element carries a script or a handler, and the answer is on the serve page as text a reader sees. The serve stage's
answers and shards hold the markup: it came from the model, through generation, to the page. The same check flags
the serve page with the answer inlined raw, so it can see one that arrives as markup."""
import json, os, shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which('chromium') or shutil.which('chromium-browser')
PROFILES = ROOT / 'outputs' / '_test_profiles'
RUN = '_planted_answers'
BASE_DIR = PROFILES / 'planted_answers_base'

# An svg element whose load handler would make `window.__answered` NaN (defined). A bigram model can emit each token
# only once, so the string is chosen for 14 distinct token ids with the tiny tokenizer (no second `=`, `++` is two `+`),
# none of them the generation prompt's last token ('\n' after `<|im_start|>assistant`).
ANSWER = '<svg onload=window.__answered-->'
ANSWER_IDS = [31, 2888, 74, 340, 1962, 32, 90, 1037, 2046, 294, 604, 288, 357, 33]

# The same checks as test_pipeline's planted-markup test, plus the answer's handler.
RAN = 'window.__planted === 1 || window.__answered !== undefined'   # a handler planted in a prompt or in the answer ran

# The report stage's front page is the study's ladder (two evaluated checkpoints on H6 and probe2), so the run has the
# fewest stages that make one: the pools, a small SFT adapter, the sealed rule and the eval of base and sft.
PROFILE = f"""extends: ../../configs/tiny.yaml
run: {RUN}
base: {{name_or_path: outputs/_test_profiles/planted_answers_base}}
serving: {{max_new_tokens: 24}}
prompts: {{serve: outputs/_test_profiles/planted_answers_base/serve.jsonl}}
sft:
  corpora:
    - {{name: tulu3, source: data/corpora/tulu_sample.jsonl, bands: [{{start: 0, stop: 16}}]}}
pools: {{seed: 6, h6_size: 8, probe2_size: 4, rounds: {{r5: 4, r6: 4}}}}
evals: {{checkpoints: [base, sft], older: {{}}, instruments: [h6, probe2]}}
stages:
  - {{name: serve, notebook: serve}}
  - {{name: pools, notebook: pools}}
  - {{name: sft, notebook: sft}}
  - {{name: preregister, notebook: preregister}}
  - {{name: eval, notebook: eval, needs: [preregister, pools, sft]}}
  - {{name: report, notebook: report, needs: [serve, pools, sft, preregister, eval], params: {{execute_library: false, library_glob: '01_chat.ipynb'}}}}
"""


def bigram_base(out: Path, answer_ids: list[int]):
    "Save a checkpoint in `out` that, greedily after the generation prompt, emits `answer_ids` then `<|im_end|>`."
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    from rsi_repro.chat import IM_END, render
    tok = AutoTokenizer.from_pretrained(ROOT / 'data/tiny_base')
    prompt_last = render([{'role': 'user', 'content': 'hi'}], tok, 512).input_ids[-1]
    chain = [prompt_last, *answer_ids, tok.convert_tokens_to_ids(IM_END)]
    sources = chain[:-1]
    assert len(set(sources)) == len(sources), f"a bigram model needs distinct tokens: {sources}"
    config = LlamaConfig.from_pretrained(ROOT / 'data/tiny_base')
    config.tie_word_embeddings = False
    model = LlamaForCausalLM.from_pretrained(ROOT / 'data/tiny_base', config=config, dtype=torch.float32)
    assert len(sources) <= config.hidden_size
    with torch.no_grad():
        for layer in model.model.layers:                  # the residual stream carries the token's embedding untouched
            layer.self_attn.o_proj.weight.zero_(); layer.mlp.down_proj.weight.zero_()
        model.model.norm.weight.fill_(1.0)
        emb, head = model.model.embed_tokens.weight, model.lm_head.weight
        assert emb.data_ptr() != head.data_ptr()           # untied: the output rows are the model's own
        head.zero_()
        for i, (t, nxt) in enumerate(zip(chain, chain[1:])):
            basis = torch.zeros(config.hidden_size); basis[i] = 1.0
            emb[t] = 0.5 * basis                           # after RMSNorm: sqrt(hidden) * basis
            head[nxt] = 10.0 * basis                       # logit ~139 for the next token, 0 for every other
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


@pytest.fixture(scope='module')
def planted_run(tmp_path_factory):
    "The constructed base (in `BASE_DIR`), a run of it through `PROFILE`'s stages: what each stage did and the run's folder."
    from rsi_repro.io import read_jsonl, write_jsonl
    from rsi_repro.pipeline import run
    shutil.rmtree(BASE_DIR, ignore_errors=True); shutil.rmtree(ROOT / 'outputs' / RUN, ignore_errors=True)
    old_cache = os.environ.get('RSI_REPRO_HASH_CACHE')
    os.environ['RSI_REPRO_HASH_CACHE'] = str(tmp_path_factory.mktemp('hashes') / 'sha256.json')   # no entry left in ~/.cache
    profile = PROFILES / f'{RUN}.yaml'
    try:
        bigram_base(BASE_DIR, ANSWER_IDS)
        write_jsonl(BASE_DIR / 'serve.jsonl', read_jsonl(ROOT / 'data/prompts/serve.jsonl')[:3])
        profile.write_text(PROFILE)
        results = run(profile, log=lambda *a: None)
        yield results, ROOT / 'outputs' / RUN
    finally:
        shutil.rmtree(ROOT / 'outputs' / RUN, ignore_errors=True); shutil.rmtree(BASE_DIR, ignore_errors=True)
        profile.unlink(missing_ok=True)
        if old_cache is None: os.environ.pop('RSI_REPRO_HASH_CACHE', None)
        else: os.environ['RSI_REPRO_HASH_CACHE'] = old_cache


def test_the_planted_answer_is_distinct_tokens_that_decode_to_it():
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(ROOT / 'data/tiny_base')
    assert tok(ANSWER, add_special_tokens=False)['input_ids'] == ANSWER_IDS and tok.decode(ANSWER_IDS) == ANSWER
    from rsi_repro.chat import render
    prompt_last = render([{'role': 'user', 'content': 'hi'}], tok, 512).input_ids[-1]      # '\n' after <|im_start|>assistant
    assert len(set(ANSWER_IDS)) == len(ANSWER_IDS) and prompt_last not in ANSWER_IDS


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)")
def test_a_models_markup_answer_is_text_in_the_browser(planted_run, tmp_path):
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM
    from cdp import Browser, inert, pages_showing_as_text
    from rsi_repro.chat import IM_END, render
    from rsi_repro.io import read_jsonl
    results, run_dir = planted_run
    # the saved checkpoint answers with the markup and stops, under plain transformers greedy decoding
    tok, model = AutoTokenizer.from_pretrained(BASE_DIR), LlamaForCausalLM.from_pretrained(BASE_DIR)
    assert not model.config.tie_word_embeddings
    ids = torch.tensor([render([{'role': 'user', 'content': 'What is a list?'}], tok, 512).input_ids])
    new = model.generate(ids, max_new_tokens=24, do_sample=False, eos_token_id=tok.convert_tokens_to_ids(IM_END),
                         pad_token_id=tok.pad_token_id)[0, ids.shape[1]:].tolist()
    assert new == ANSWER_IDS + [tok.convert_tokens_to_ids(IM_END)] and tok.decode(new[:-1]) == ANSWER

    # through the pipeline's generation: every served answer is the markup, stopped at <|im_end|>
    assert {r.status for r in results} == {'ran'}, results
    answers = read_jsonl(run_dir / 'serve/answers.jsonl')
    shards = [r for p in sorted((run_dir / 'serve/shards').rglob('shard-*.jsonl')) for r in read_jsonl(p)]   # what generation wrote
    assert len(answers) == 3 and all(a['response'] == ANSWER and a['finish_reason'] == 'stop' and a['new_tokens'] == len(ANSWER_IDS) + 1
                                     for a in answers), answers
    assert sorted((r['id'], r['response']) for r in shards) == sorted((a['id'], ANSWER) for a in answers)

    site = run_dir / 'report/site'
    serve_page = site / 'stages/serve.html'
    assert serve_page.exists()
    browser = Browser(CHROMIUM, tmp_path / 'profile', tmp_path / 'downloads')
    try:
        shown = pages_showing_as_text(browser, site, ANSWER, RAN)
        assert 'stages/serve.html' in shown, shown                                # the answer reached the page, as text
        # the check sees an answer that arrives raw: the serve page with the answer inlined as markup is flagged
        text = serve_page.read_text()
        escaped = ANSWER.replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')
        assert escaped in text
        raw = tmp_path / 'serve_raw_answer.html'
        raw.write_text(text.replace(escaped, ANSWER))
        fired, handlers = inert(browser, browser.page('about:blank'), raw, RAN)
        assert fired and handlers > 0, (fired, handlers)
    finally:
        browser.close()
