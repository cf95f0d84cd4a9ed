"""configs/nemotron.yaml says which settings are the card's: every project choice is marked 'not in the card' on its line,
every card number is the card's, and every setting is one or the other (or wiring). The lists: tests/nemotron_settings.yaml."""
import math
import re
from fnmatch import fnmatchcase
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "configs" / "nemotron.yaml"
FIXTURE = Path(__file__).with_name("nemotron_settings.yaml")
MARK = "not in the card"


def leaves(node, path=()):
    "(dotted key, value, 0-based line of the key) for every setting; a list of scalars is one setting."
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            yield from _leaf_or_walk(v, path + (k.value,), k.start_mark.line)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            yield from _leaf_or_walk(v, path + (str(i),), v.start_mark.line)


def _leaf_or_walk(v, path, line):
    if isinstance(v, yaml.MappingNode) or (isinstance(v, yaml.SequenceNode) and any(
            isinstance(x, (yaml.MappingNode, yaml.SequenceNode)) for x in v.value)):
        yield from leaves(v, path)
    else:
        yield ".".join(path), yaml.safe_load(yaml.serialize(v)), line


def comment(line: str) -> str:
    "The comment of a YAML line (text after the first ' #' outside quotes)."
    quote = None
    for i, ch in enumerate(line):
        if ch in "\"'" and quote in (None, ch):
            quote = None if quote else ch
        elif ch == "#" and quote is None and (i == 0 or line[i - 1].isspace()):
            return line[i + 1:].strip()
    return ""


def _match(parts, pat):
    "Dotted-path match: `*` is any one part, `**` any number of parts (none included)."
    if not pat:
        return not parts
    if pat[0] == "**":
        return any(_match(parts[i:], pat[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], pat[0]) and _match(parts[1:], pat[1:])


def matches(key, patterns): return any(_match(key.split("."), p.split(".")) for p in patterns)


def same(a, b): return math.isclose(a, b, rel_tol=1e-12) if isinstance(a, float) or isinstance(b, float) else a == b


def read_profile(text: str):
    "({dotted key: (value, line)}, lines) of a profile's text."
    return {k: (v, line) for k, v, line in leaves(yaml.compose(text))}, text.splitlines()


@pytest.fixture(scope="module")
def profile(): return read_profile(PROFILE.read_text())


@pytest.fixture(scope="module")
def fixture(): return yaml.safe_load(FIXTURE.read_text())


def classify(key, fx):
    if key in fx["card"] or matches(key, [k for k in fx["card"] if "*" in k]):
        return "card"
    if matches(key, fx["project"]):
        return "project"
    if matches(key, fx["wiring"]):
        return "wiring"
    return None


def unclassified(settings, fx): return [k for k in settings if classify(k, fx) is None]


def unmarked(settings, lines, fx):
    return [f"{PROFILE.name}:{line + 1}: {k}" for k, (_, line) in settings.items()
            if classify(k, fx) == "project" and MARK not in comment(lines[line])]


def wrong_numbers(settings, lines, fx):
    card, wrong = fx["card"], []
    for k, (v, line) in settings.items():
        if classify(k, fx) != "card":
            continue
        want = card[k] if k in card else next(card[p] for p in card if "*" in p and matches(k, [p]))
        if not same(v, want["value"]):
            wrong.append(f"{PROFILE.name}:{line + 1}: {k} = {v!r}, the card says {want['value']!r} ({want['card']})")
        if re.fullmatch(rf"(.*\W)?{MARK}\W*", comment(lines[line])):      # the whole line marked as not the card's
            wrong.append(f"{PROFILE.name}:{line + 1}: {k} is the card's number on a line marked '{MARK}'")
    return wrong + [f"{k}: listed as a card number in {FIXTURE.name} but not set" for k in card if "*" not in k and k not in settings]


def test_every_setting_is_classified(profile, fixture):
    missing = unclassified(profile[0], fixture)
    assert not missing, (f"{PROFILE.name}: settings that are neither a card number, a project choice nor wiring in "
                         f"{FIXTURE.name}: {missing}")


def test_project_choices_are_marked_on_their_line(profile, fixture):
    bad = unmarked(*profile, fixture)
    assert not bad, f"project choices without '{MARK}' on their line: {bad}"


def test_card_numbers_are_the_cards(profile, fixture):
    bad = wrong_numbers(*profile, fixture)
    assert not bad, bad


def test_stage4_effective_batch_is_the_cards_48(profile):
    settings, _ = profile
    assert settings["rounds.optim.micro_batch"][0] * settings["rounds.optim.grad_accum"][0] == 48   # "effective batch 48 examples/step"


def test_the_checks_catch_an_unmarked_choice_a_wrong_number_and_a_new_setting(fixture):
    text = PROFILE.read_text()
    assert "  seed: 6                     # not in the card\n" in text and "seed: 11, steps: 219," in text
    text = text.replace("  seed: 6                     # not in the card\n", "  seed: 6\n")
    text = text.replace("seed: 11, steps: 219,", "seed: 11, steps: 220,").replace("  backend: vllm", "  colour: red\n  backend: vllm")
    settings, lines = read_profile(text)
    assert [u.split(": ")[1] for u in unmarked(settings, lines, fixture)] == ["pools.seed"]
    assert [w.split(": ")[1].split(" =")[0] for w in wrong_numbers(settings, lines, fixture)] == ["repair.optim.steps"]
    assert unclassified(settings, fixture) == ["serving.colour"]


def test_path_patterns():
    assert matches("stages.3.needs", ["stages.**"]) and matches("dpo.grid.0.name", ["**.name"])
    assert matches("sft.lora.r", ["*.lora.r"]) and not matches("sft.lora.r.x", ["*.lora.r"])
    assert not matches("rounds.arms.1.seed", ["rounds.*.seed"])


def test_comment_parsing():
    assert comment('  a: "x # y"   # not in the card') == "not in the card"
    assert comment("  a: 1") == "" and comment("  b: x#y  # z") == "z"
