"""configs/nemotron.yaml says which settings are the card's: every project choice is marked 'not in the card' on its line,
every card number is the card's, and every setting is one or the other (or wiring). The lists: tests/nemotron_settings.yaml.
A setting the profile does not write is resolved from the library's defaults when the profile loads: each of those is
listed, with the value it resolves to, in the same file's `defaults` table, and the loaded profile must resolve exactly that."""
import math
import re
from fnmatch import fnmatchcase
from pathlib import Path

import pytest
import yaml

from rsi_repro.config import load_profile
from rsi_repro.typed import to_dict

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "configs" / "nemotron.yaml"
FIXTURE = Path(__file__).with_name("nemotron_settings.yaml")
MARK = "not in the card"


def leaves(node, path=()):
    "(dotted key, value, 0-based line of the key) for every setting; a list of scalars (or an empty mapping) is one setting."
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            yield from _leaf_or_walk(v, path + (k.value,), k.start_mark.line)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            yield from _leaf_or_walk(v, path + (str(i),), v.start_mark.line)


def _leaf_or_walk(v, path, line):
    if (isinstance(v, yaml.MappingNode) and v.value) or (isinstance(v, yaml.SequenceNode) and any(
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


def resolved(node, path=()):
    """(dotted key, value) for every setting of a loaded profile's plain data (`rsi_repro.typed.to_dict`), walked as `leaves`
    walks the YAML: mappings and lists of mappings or lists by key and index, a list of scalars or an empty mapping one setting."""
    if isinstance(node, dict) and node:
        for k, v in node.items(): yield from resolved(v, path + (str(k),))
    elif isinstance(node, list) and any(isinstance(x, (dict, list)) for x in node):
        for i, v in enumerate(node): yield from resolved(v, path + (str(i),))
    else:
        yield ".".join(path), node


def written(key, settings):
    "Whether the profile writes `key`: on its own line, or inside a mapping or list written whole (`vllm: {...}`, `targets: [...]`)."
    parts = key.split(".")
    return any(".".join(parts[:i]) in settings for i in range(1, len(parts) + 1))


def same_default(a, b):
    "`same`, with true and false told apart from 1 and 0."
    if isinstance(a, bool) or isinstance(b, bool): return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)): return same(a, b)
    return type(a) is type(b) and a == b


def listed(key, defaults):
    "The `defaults` entry that lists `key`: its own, else the first pattern matching it (None: not listed)."
    return key if key in defaults else next((p for p in defaults if "*" in p and matches(key, [p])), None)


def unlisted_defaults(values, settings, fx):
    """Each setting the loaded profile resolves (`values`, {dotted key: value}) that the profile does not write (`settings`)
    and that is not wiring: one not in the `defaults` table, one whose value differs from the table's, and each table entry
    that lists no such setting (written in the profile now, or gone from the library)."""
    table, bad, used = fx["defaults"], [], set()
    for k, v in values.items():
        if written(k, settings) or matches(k, fx["wiring"]):
            continue
        entry = listed(k, table)
        if entry is None:
            bad.append(f"{k} = {v!r}: resolved from the library's default, neither written in {PROFILE.name} nor listed "
                       f"in {FIXTURE.name}'s defaults")
            continue
        used.add(entry)
        if not same_default(v, table[entry]["value"]):
            bad.append(f"{k}: the profile resolves {v!r}, {FIXTURE.name}'s defaults list {table[entry]['value']!r}")
    return bad + [f"{p}: listed in {FIXTURE.name}'s defaults but no unwritten setting of {PROFILE.name} is {p}"
                  for p in table if p not in used]


@pytest.fixture(scope="module")
def values():
    "{dotted key: value} of every setting configs/nemotron.yaml resolves when it loads."
    return dict(resolved(to_dict(load_profile(PROFILE))))


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


def test_every_default_the_profile_resolves_is_listed_with_its_value(profile, fixture, values):
    settings, _ = profile
    assert "extends" not in settings, f"{PROFILE.name} extends another profile: its written settings are in two files"
    bad = unlisted_defaults(values, settings, fixture)
    assert not bad, f"settings {PROFILE.name} resolves without writing them: {bad}"


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


def test_the_defaults_check_catches_a_missing_entry_a_changed_value_a_new_default_and_a_stale_entry(profile, fixture, values):
    settings, _ = profile
    table = fixture["defaults"]
    assert table["rounds.optim.weight_decay"] == {"value": 0.0} and table["soups.svd_rank"] == {"value": None}
    missing = {k: v for k, v in table.items() if k != "rounds.optim.weight_decay"}
    bad = unlisted_defaults(values, settings, {**fixture, "defaults": missing})
    assert len(bad) == 1 and bad[0].startswith("rounds.optim.weight_decay = 0.0: ") and "neither written" in bad[0]
    changed = {**table, "soups.svd_rank": {"value": 768}}
    bad = unlisted_defaults(values, settings, {**fixture, "defaults": changed})
    assert bad == [f"soups.svd_rank: the profile resolves None, {FIXTURE.name}'s defaults list 768"]
    assert unlisted_defaults({**values, "serving.vllm.new_knob": 3}, settings, fixture)[0].startswith("serving.vllm.new_knob = 3: ")
    assert unlisted_defaults(values, settings, {**fixture, "defaults": {**table, "serving.temperature": {"value": 0.0}}}) == [
        f"serving.temperature: listed in {FIXTURE.name}'s defaults but no unwritten setting of {PROFILE.name} is serving.temperature"]
    assert not same_default(1, True) and not same_default(0.0, None) and same_default(0.01, 0.010000000000000002)


def test_resolved_walks_as_leaves_walks_the_yaml():
    data = {"a": {"b": 1, "c": [1, 2], "d": [{"e": None}], "f": {}}}
    assert dict(resolved(data)) == {"a.b": 1, "a.c": [1, 2], "a.d.0.e": None, "a.f": {}}
    assert dict(resolved(data)) == {k: v for k, v, _ in leaves(yaml.compose(yaml.safe_dump(data)))}
    assert written("serving.vllm.enforce_eager", {"serving.vllm": ({}, 0)}) and not written("serving.vll", {"serving.vllm": ({}, 0)})


def test_path_patterns():
    assert matches("stages.3.needs", ["stages.**"]) and matches("dpo.grid.0.name", ["**.name"])
    assert matches("sft.lora.r", ["*.lora.r"]) and not matches("sft.lora.r.x", ["*.lora.r"])
    assert not matches("rounds.arms.1.seed", ["rounds.*.seed"])


def test_comment_parsing():
    assert comment('  a: "x # y"   # not in the card') == "not in the card"
    assert comment("  a: 1") == "" and comment("  b: x#y  # z") == "z"
