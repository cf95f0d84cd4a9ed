"""DESIGN.md's module map, drawn from the code: the layers of `tests/test_architecture.py` and the modules in each,
stacked, checked against the package's own imports (the same walk that test makes: none may point up). Written between markers in DESIGN.md, so the picture cannot drift from the code (stdlib only).

    python3 tools/module_map.py write   # rewrite the block in DESIGN.md
    python3 tools/module_map.py check   # exit 1, naming the file, when DESIGN.md's block is not what the code gives
"""
from __future__ import annotations
import importlib.util, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / 'DESIGN.md'
BEGIN, END = '<!-- module-map:begin (tools/module_map.py write) -->', '<!-- module-map:end -->'


def _architecture():
    "tests/test_architecture.py as a module: its LAYERS and its import walk."
    spec = importlib.util.spec_from_file_location('architecture', ROOT / 'tests' / 'test_architecture.py')
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod


def module_map() -> str:
    "The mermaid picture: a box per layer (lowest at the bottom) naming its modules, each resting on the one below."
    arch = _architecture()
    mods = arch.modules(arch.PACKAGE)
    g = arch.graph(arch.PACKAGE, 'rsi_repro')
    layer = lambda m: arch.layer_of(m, arch.LAYERS)
    node = lambda i: f'L{i}'
    out = ['```mermaid', 'flowchart BT']
    for i, (name, names) in enumerate(arch.LAYERS):
        out.append(f'  {node(i)}["<b>{name}</b><br/>{", ".join(names)}"]')   # test_architecture: every module has a layer
    # every layer imports several below it (drawn all, the picture is a thicket): the arrow says "may import", one step down
    out += [f'  {node(i)} --> {node(i - 1)}' for i in range(len(arch.LAYERS) - 1, 0, -1)]
    up = arch.upward(g, 'rsi_repro')
    if up: sys.exit("imports from a higher layer (tests/test_architecture.py):\n" + "\n".join(up))
    out.append('```')
    return '\n'.join(out)


def block() -> str:
    return f'{BEGIN}\n{module_map()}\n{END}'


def current(text: str) -> str:
    if BEGIN not in text or END not in text: sys.exit(f"{DOC.name}: no module-map block ({BEGIN} ... {END})")
    return text[text.index(BEGIN):text.index(END) + len(END)]


if __name__ == '__main__':
    what = sys.argv[1] if len(sys.argv) > 1 else 'check'
    text = DOC.read_text()
    if what == 'write':
        DOC.write_text(text.replace(current(text), block())); print(f"{DOC.name}: module map written")
    elif what == 'check':
        if current(text) != block():
            sys.exit(f"{DOC.name}: the module map is not what the code gives (modules, layers or the imports "
                     f"between layers changed): run python3 tools/module_map.py write")
        print(f"{DOC.name}: the module map is the code's")
    else: sys.exit(f"usage: {sys.argv[0]} write|check")
