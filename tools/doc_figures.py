"""Figures in the README and benchmarks/RESULTS.md written from the result files they come from, never typed.

A figure is marked where it stands, with the file, the field and the format it is written in:

    ... at <!-- fig benchmarks/results/checker_python3.11.json:rsi_repro_responses_per_s ,.1f -->3,197.3<!-- /fig --> responses/s

The field is a path into the JSON file (a CSV file reads as a list of rows, `[3].delta`): keys separated by dots, list
items as [i] (`seconds.reference[2]`), every item as [*] (`all_rates[*].ifbench`), a run of items as [a:b] (`stages[1:]`), a key that holds dots in quotes and
brackets (`rates["train.sft.nemotron_h-30b-a3b"].value`), the one row of a list whose key has a value
(`ladder[checkpoint=sft][instrument=h6].fixed`: a row is found by what it is, not by where it sits), and `len(...)`,
`min(...)`, `max(...)` or `sum(...)` around a path. The format is Python's format specification (`,.1f`, `.2f`, `,d`);
an optional suffix after a `|` scales first: `|x100` for a share shown as a percentage. The marks are HTML comments, so
the rendered page shows the figure alone.

    python tools/doc_figures.py write     # every marked figure written from its file
    python tools/doc_figures.py check     # exit 1 naming each figure (document, line, its sentence) that is not what its
                                          # file gives, or whose file or field is gone (`make docs-check`, CI)
"""
from __future__ import annotations
import json, re, sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ('README.md', 'benchmarks/RESULTS.md')
MARK = re.compile(r'<!-- fig (?P<file>[^\s:]+):(?P<field>\S+?)(?: (?P<fmt>[^\s|]*))?(?:\|(?P<scale>x\d+(?:\.\d+)?))? -->'
                  r'(?P<shown>.*?)<!-- /fig -->')
STEP = re.compile(r'\.?([^.\["\]=]+)|\[(\d+|\*)\]|\["([^"]+)"\]|\[([^\]=:]+)=([^\]]*)\]|\[(\d*:\d*)\]')


class FigureError(ValueError): pass


@dataclass(frozen=True)
class Figure:
    doc: str           # the document, from the project root
    line: int          # its line there
    file: str          # the result file, from the project root
    field: str         # the path into it
    fmt: str           # a format specification
    scale: float       # multiplied before formatting
    shown: str         # what the document shows now
    sentence: str      # the line it stands in, without marks (to name it)


def value_at(data, field: str):
    "The value at `field` in parsed JSON: `a.b[2].c`; `a[*].c` for every item's c; `len(...)`, `min(...)`, `max(...)`, `sum(...)`."
    if m := re.fullmatch(r'(len|min|max|sum)\((.+)\)', field): return AGGREGATES[m.group(1)](value_at(data, m.group(2)))
    return _walk(data, STEP.findall(field), field)

AGGREGATES = {'len': len, 'min': min, 'max': max, 'sum': sum}

def _walk(at, steps, field: str):
    narrowed = False                          # `at` is the rows a [key=value] left: exactly one may go on
    def one(rows):
        if len(rows) != 1: raise FigureError(f"{field!r}: {len(rows)} rows match, not one")
        return rows[0]
    for i, (key, index, quoted, fkey, fvalue, span) in enumerate(steps):
        if span:                              # [a:b]: the items from a up to b, as Python slices a list
            if narrowed: at, narrowed = one(at), False
            if not isinstance(at, list): raise FigureError(f"no field {field!r}")
            a, _, b = span.partition(':'); at = at[int(a) if a else None:int(b) if b else None]; continue
        if fkey:
            at = [row for row in (at if not narrowed else at) if isinstance(row, dict) and str(row.get(fkey)) == fvalue]
            narrowed = True; continue
        if narrowed: at, narrowed = one(at), False
        if index == '*': return [_walk(item, steps[i + 1:], field) for item in at]
        try: at = at[int(index)] if index else at[quoted or key]
        except (KeyError, IndexError, TypeError, ValueError): raise FigureError(f"no field {field!r}") from None
    return one(at) if narrowed else at


def _cell(text: str):
    for kind in (int, float):
        try: return kind(text)
        except ValueError: pass
    return text

def read_result(path: Path):
    "A result file as data: JSON parsed; a CSV as a list of rows, {column: value}, numbers as numbers."
    if path.suffix == '.csv':
        import csv
        return [{k: _cell(v) for k, v in row.items()} for row in csv.DictReader(path.open(newline='', encoding='utf-8'))]
    return json.loads(path.read_text(encoding='utf-8'))


def figures(doc: str, root: Path = ROOT) -> list[Figure]:
    "Every marked figure of a document."
    out = []
    for n, line in enumerate((root / doc).read_text(encoding='utf-8').splitlines(), 1):
        for m in MARK.finditer(line):
            scale = float(m['scale'][1:]) if m['scale'] else 1.0
            out.append(Figure(doc, n, m['file'], m['field'], m['fmt'] or '', scale, m['shown'],
                              MARK.sub(lambda x: x['shown'], line).strip()))
    return out


def render(fig: Figure, root: Path = ROOT, cache: dict | None = None) -> str:
    "The figure as its file gives it."
    cache = {} if cache is None else cache
    path = root / fig.file
    if fig.file not in cache:
        if not path.is_file(): raise FigureError(f"{fig.file} does not exist")
        cache[fig.file] = read_result(path)
    value = value_at(cache[fig.file], fig.field)
    if fig.scale != 1.0: value = value * fig.scale
    try: return format(value, fig.fmt)
    except (TypeError, ValueError) as e: raise FigureError(f"{fig.field} = {value!r} cannot be written as {fig.fmt!r}: {e}") from None


def problems(root: Path = ROOT, docs=DOCS) -> list[str]:
    "One line per figure that is not what its file gives: document, line, the figure, the file and field, the sentence."
    out, cache = [], {}
    for doc in docs:
        for f in figures(doc, root):
            try: want = render(f, root, cache)
            except FigureError as e:
                out.append(f"{f.doc}:{f.line}: {f.shown!r} from {f.file}:{f.field}: {e}  [{f.sentence[:160]}]"); continue
            if want != f.shown:
                out.append(f"{f.doc}:{f.line}: shows {f.shown!r}, {f.file}:{f.field} gives {want!r}  [{f.sentence[:160]}]")
    return out


def write(root: Path = ROOT, docs=DOCS) -> int:
    "Write every marked figure from its file; the number of figures changed."
    changed, cache = 0, {}
    for doc in docs:
        path = root / doc
        text = path.read_text(encoding='utf-8')
        def fill(m):
            nonlocal changed
            f = Figure(doc, 0, m['file'], m['field'], m['fmt'] or '', float(m['scale'][1:]) if m['scale'] else 1.0, m['shown'], '')
            new = render(f, root, cache)
            changed += new != m['shown']
            return m.group(0).replace(f"-->{m['shown']}<!-- /fig -->", f"-->{new}<!-- /fig -->")
        new_text = MARK.sub(fill, text)
        if new_text != text: path.write_text(new_text, encoding='utf-8')
    return changed


def main(argv=None) -> int:
    cmd = (argv or sys.argv[1:] or ['check'])[0]
    if cmd == 'write':
        print(f"{write()} figure(s) rewritten from their files"); return 0
    if cmd == 'check':
        bad = problems()
        for line in bad: print(line, file=sys.stderr)
        n = sum(len(figures(d)) for d in DOCS)
        if bad: print(f"{len(bad)} of {n} figure(s) are not what their files give: `python tools/doc_figures.py write`, "
                      "or correct the file", file=sys.stderr); return 1
        print(f"{n} figure(s) in {', '.join(DOCS)} are what their files give"); return 0
    print(__doc__, file=sys.stderr); return 2


if __name__ == '__main__': sys.exit(main())
