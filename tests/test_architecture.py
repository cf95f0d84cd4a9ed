"""The package's import structure: imports point down the layers (at module level and inside functions alike),
there is no import cycle, the lower layers import without the ML stack (and the lowest four without pandas), and
no module below the stages takes a profile (it takes the values a stage resolves from one).

The layers are listed here, lowest first, and in the README's "How the code is laid out"; a new module must be given one."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rsi_repro"

# Lowest first. A module may import modules of its own layer or of a lower one, never of a higher one.
# `instruments` stands for the package and every module in it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("io", "typed")),
    ("checkers and statistics", ("constraints", "langdetect_exact", "ifeval_checks", "ifeval", "stats", "chat")),
    ("settings", ("evals", "promotion", "profile_sections", "config")),
    ("run layout and model-free tools", ("layout", "nodes", "compute", "pools", "preregister", "manifests")),
    ("data, scoring and tables", ("corpora", "trained_on", "mix_targets", "instruments", "paired", "pair_read", "card_audit", "grid", "judgement",
                                  "summary")),
    ("models", ("bases", "backends", "engines", "generate", "tiny", "train_setup", "train_batches", "train_run", "train", "rejection", "soups")),
    ("evaluation", ("evaluate", "eval_report")),
    ("stages", ("recipes", "read_stages", "eval_plan", "run_view")),
    ("runner", ("stage_keys", "stage_folders", "warm_kernels", "pipeline", "front_page", "report", "workload", "estimate", "scaling", "profile_init", "cli")),
]
# Below the stages, a profile is read only by its own modules and by the run folder's layout; every other module takes
# what a stage resolved from it (a section, a path, a `ModelRef`, an `EvalPlan`, a `RunView`). PENDING: functions that
# still take one, each with where it goes (none today).
PROFILE_READERS = ("config", "profile_sections", "layout")
PENDING: dict[str, set[str]] = {}
MODEL_FREE = [m for _, ms in LAYERS[:4] for m in ms]     # import without torch, transformers, peft, trl or pandas
TORCH_FREE = [m for _, ms in LAYERS[:5] for m in ms]     # import without torch, transformers, peft or trl
ML_STACK = ("torch", "transformers", "peft", "trl")


def layer_of(module: str, layers=LAYERS) -> int:
    "The layer index of a module name such as 'config' or 'instruments.math'."
    for i, (_, names) in enumerate(layers):
        if module in names or module.split(".")[0] in names: return i
    raise KeyError(module)


def modules(package: Path) -> dict[str, Path]:
    "{dotted module name under the package: file}, without the package's own __init__ and nbdev's index."
    out = {}
    for f in sorted(package.rglob("*.py")):
        rel = f.relative_to(package).with_suffix("")
        if rel.name == "__init__": rel = rel.parent
        name = ".".join(rel.parts)
        if name and name != "_modidx": out[name] = f
    return out


def imports_of(name: str, path: Path, known: set[str], pkg: str) -> list[tuple[str, int]]:
    "(imported module of the package, line) for every import in the file, inside functions included."
    tree, here = ast.parse(path.read_text()), name.split(".")
    is_pkg = path.name == "__init__.py"
    found = []
    def add(dotted: str, line: int):
        if dotted.startswith(pkg + "."):
            mod = dotted[len(pkg) + 1:]
            while mod and mod not in known: mod = mod.rpartition(".")[0]
            if mod and mod != name: found.append((mod, line))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names: add(a.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_pkg else here[:-1]
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                stem = ".".join([pkg, *base, *([node.module] if node.module else [])])
            else:
                stem = node.module or ""
            for a in node.names: add(f"{stem}.{a.name}", node.lineno)   # `from pkg import module` names a module
            add(stem, node.lineno)
    return sorted(set(found), key=lambda x: x[1])


def graph(package: Path, pkg: str) -> dict[str, list[tuple[str, int]]]:
    mods = modules(package)
    return {m: imports_of(m, f, set(mods), pkg) for m, f in mods.items()}


def upward(g: dict, pkg: str, layers=LAYERS) -> list[str]:
    "Every import of a module from a higher layer, as 'file:line: a (layer) imports b (layer)'."
    bad = []
    for a, targets in g.items():
        for b, line in targets:
            la, lb = layer_of(a, layers), layer_of(b, layers)
            if lb > la:
                bad.append(f"{pkg}/{a.replace('.', '/')}.py:{line}: {a} ({layers[la][0]}) imports {b} ({layers[lb][0]})")
    return bad


def profile_parameters(package: Path, pkg: str, layers=LAYERS, readers=PROFILE_READERS, pending=PENDING) -> list[str]:
    """Every parameter named `profile` or annotated `Profile`, of a function (or lambda) in a module below the stages
    layer other than `readers`, as 'file:line: module.function(parameter)'; `pending` maps a module to functions let be."""
    below = [name for name, _ in layers].index("stages")
    found = []
    for name, path in modules(package).items():
        if layer_of(name, layers) >= below or name.split(".")[0] in readers: continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)): continue
            fn, a = getattr(node, "name", "<lambda>"), node.args
            if fn in pending.get(name, ()): continue
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)):
                ann = ast.unparse(arg.annotation) if arg.annotation else ""
                if arg.arg == "profile" or re.search(r"\bProfile\b", ann):
                    found.append(f"{pkg}/{name.replace('.', '/')}.py:{node.lineno}: {name}.{fn}({arg.arg}{': ' + ann if ann else ''})")
    return found


def cycles(g: dict) -> list[list[str]]:
    "The import cycles (each as a closed path of module names), found by depth-first search."
    out, state, stack = [], {}, []
    def visit(m):
        state[m] = 1; stack.append(m)
        for t, _ in g.get(m, ()):
            if state.get(t) == 1: out.append(stack[stack.index(t):] + [t])
            elif t not in state: visit(t)
        stack.pop(); state[m] = 2
    for m in sorted(g):
        if m not in state: visit(m)
    return out


def test_every_module_has_a_layer():
    missing = [m for m in modules(PACKAGE) if not any(m == n or m.split(".")[0] == n for _, ns in LAYERS for n in ns)]
    assert not missing, f"give these modules a layer in tests/test_architecture.py (and in the README's layout): {missing}"


def test_the_readme_names_every_layer():
    readme = (ROOT / "README.md").read_text()
    for name, mods in LAYERS:
        assert f"| {name} |" in readme and all(f"`{m}`" in readme for m in mods), f"README: layer {name!r} or one of {mods} missing"


def test_imports_point_down_the_layers():
    bad = upward(graph(PACKAGE, "rsi_repro"), "rsi_repro")
    assert not bad, "imports from a higher layer:\n" + "\n".join(bad)


def test_no_import_cycle():
    found = cycles(graph(PACKAGE, "rsi_repro"))
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_checks_catch_an_upward_import_inside_a_function_and_a_cycle(tmp_path):
    "The same checks on a small package that breaks both rules, the upward import hidden in a function."
    pkg = tmp_path / "demo"; (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text(""); (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "low.py").write_text("import json\n\ndef f():\n    from demo.high import g\n    return g\n")
    (pkg / "high.py").write_text("from .low import f\nfrom . import mid\n")
    (pkg / "mid.py").write_text("from demo.sub.leaf import x\n")
    (pkg / "sub" / "leaf.py").write_text("from ..mid import y\n")
    layers = [("low", ("low",)), ("mid", ("mid", "sub")), ("high", ("high",))]
    g = graph(pkg, "demo")
    assert g["low"] == [("high", 4)] and ("mid", 2) in g["high"] and g["sub.leaf"] == [("mid", 1)]
    assert upward(g, "demo", layers) == ["demo/low.py:4: low (low) imports high (high)"]
    assert sorted(map(tuple, cycles(g))) == [("high", "low", "high"), ("mid", "sub.leaf", "mid")]


def test_no_module_below_the_stages_takes_a_profile():
    found = profile_parameters(PACKAGE, "rsi_repro")
    assert not found, ("these take a profile below the stages layer; take the values a stage resolves from it "
                       "(rsi_repro.eval_plan, rsi_repro.run_view) instead:\n" + "\n".join(found))


def test_the_profile_check_catches_a_profile_parameter(tmp_path):
    "The same check on a small package: a named parameter, an annotated one, one in a lambda, and the exceptions."
    pkg = tmp_path / "demo"; (pkg / "sub").mkdir(parents=True)
    for f in ("__init__.py", "sub/__init__.py"): (pkg / f).write_text("")
    (pkg / "low.py").write_text("def f(x, profile=None):\n    return x\n\nclass C:\n    def m(self, *, p: 'Optional[Profile]'):\n        pass\n")
    (pkg / "sub" / "leaf.py").write_text("g = lambda profile: profile\ndef h(r: RegressionProfile, profile_path: str): pass\n")
    (pkg / "cfg.py").write_text("def check(profile: Profile): pass\n")
    (pkg / "later.py").write_text("def from_profile(profile): pass\ndef other(profile): pass\n")
    (pkg / "top.py").write_text("def stage(profile: Profile): pass\n")
    layers = [("low", ("low", "sub", "cfg", "later")), ("stages", ("top",))]
    assert profile_parameters(pkg, "demo", layers, readers=("cfg",), pending={"later": {"from_profile"}}) == [
        "demo/later.py:2: later.other(profile)", "demo/low.py:1: low.f(profile)", "demo/low.py:5: low.m(p: 'Optional[Profile]')",
        "demo/sub/leaf.py:1: sub.leaf.<lambda>(profile)"]


BLOCKER = textwrap.dedent('''
    import importlib, importlib.abc, sys
    BLOCKED = set(sys.argv[1].split(","))
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED: raise ImportError(f"blocked import of {name}")
    sys.meta_path.insert(0, Block())
    failed = []
    for m in sys.argv[2].split(","):
        try: importlib.import_module("rsi_repro." + m)
        except ImportError as e: failed.append(f"{m}: {e}")
    loaded = sorted(b for b in BLOCKED if b in sys.modules)
    print("\\n".join(failed + [f"loaded: {b}" for b in loaded]) or "ok")
''')


def _import_blocked(mods: list[str], blocked) -> str:
    "Import `rsi_repro.<m>` for every m in a fresh interpreter where importing any of `blocked` fails."
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", BLOCKER, ",".join(blocked), ",".join(mods)], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_model_free_layers_import_without_the_ml_stack_or_pandas():
    present = [m for m in MODEL_FREE if m in modules(PACKAGE)]
    assert {"config", "stats", "preregister", "pools", "ifeval", "layout", "io", "evals", "promotion"} <= set(present)
    assert _import_blocked(present, (*ML_STACK, "pandas")) == "ok"


def test_data_scoring_and_tables_import_without_the_ml_stack():
    mods = modules(PACKAGE)
    present = [m for m in mods for n in TORCH_FREE if m == n or m.startswith(n + ".")]
    assert {"instruments.math", "pair_read", "summary", "grid", "corpora"} <= set(present)
    assert _import_blocked(present, ML_STACK) == "ok"


def test_a_stage_imports_no_nltk_until_it_scores_text():
    "Importing NLTK takes about a second (most of NLTK, and SciPy's statistics); every stage kernel imports the recipes."
    assert _import_blocked(["recipes", "eval_plan", "eval_report", "pipeline", "ifeval", "ifeval_checks"], ("nltk",)) == "ok"
    from rsi_repro.ifeval_checks import count_sentences, count_words, word_tokenize
    assert (count_sentences("One. Two."), count_words("a b"), word_tokenize("Hi there.")) == (2, 2, ['Hi', 'there', '.'])


def test_the_blocker_blocks():
    "A module that needs pandas at import fails under the blocker, so a pass above means something."
    assert "evaluate: blocked import of pandas" in _import_blocked(["evaluate"], ("pandas",))


def test_designs_module_map_is_drawn_from_the_code():
    "DESIGN.md's picture is what tools/module_map.py draws from today's layers; a module left out of it is caught."
    sys.path.insert(0, str(ROOT / "tools"))
    import module_map
    design = (ROOT / "DESIGN.md").read_text()
    assert module_map.current(design) == module_map.block(), "run python3 tools/module_map.py write"
    assert "train_setup" in module_map.block()
    stale = module_map.current(design).replace(", train_setup", "")
    assert stale != module_map.block()


MAX_MODULE_LINES = 500


def test_no_module_is_over_500_lines_and_each_notebook_opens_saying_what_it_is_for():
    "One job per room: every exported module at most 500 lines; its notebook's first text is a title and what it is for."
    import json
    long = {m: n for m, f in modules(PACKAGE).items() if (n := len(f.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these along their seams (DESIGN.md): {long}"
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        text = [c for c in json.loads(nb.read_text())["cells"][:3] if c["cell_type"] == "markdown"]
        lines = [l for l in "".join(text[0]["source"]).splitlines() if l.strip()] if text else []
        assert len(lines) >= 2 and lines[0].startswith("# "), f"{nb.name}: open with a title and a sentence of what it is for"
