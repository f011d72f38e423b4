#!/usr/bin/env python3
"""Lists which top-level modules of a crate's `src/` name which (`crate::x` paths outside
`#[cfg(test)]` modules, inline or in a file of their own) and exits 1 if they form a circle.

    python3 scripts/module-graph.py [SRC_DIR] [--forbid A:B,C ...]    # default: src

`--forbid A:B,C`: module A must not name B or C, circle or not (exit 1 naming the lines).

Each edge `a -> b` means some non-test code in module `a` (src/a.rs or src/a/**) names
`crate::b`. A circle (a strongly connected group of two or more modules) is printed with the
lines that make it.
"""
import pathlib
import re
import sys

args = sys.argv[1:]
forbidden: dict[str, set[str]] = {}
while "--forbid" in args:
    i = args.index("--forbid")
    rule = args[i + 1]
    del args[i : i + 2]
    a, bs = rule.split(":")
    forbidden.setdefault(a, set()).update(bs.split(","))
root = pathlib.Path(args[0] if args else "src")
USE = re.compile(r"\bcrate::(?:\{\s*)?([a-z_][a-z0-9_]*)")
GROUP = re.compile(r"\bcrate::\{([^}]*)\}", re.S)
TEST_MOD = re.compile(r"^#\[cfg\(test\)\]\s*\n\s*(pub(\(crate\))?\s+)?mod\s+\w+\s*\{", re.M)


def non_test(text: str) -> str:
    """The file without its `#[cfg(test)] mod … { … }` blocks (brace-matched)."""
    out, pos = [], 0
    for m in TEST_MOD.finditer(text):
        if m.start() < pos:
            continue
        out.append(text[pos:m.start()])
        depth, i = 0, m.end() - 1
        while i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                break
        pos = i
    out.append(text[pos:])
    return "".join(out)


def module_of(path: pathlib.Path) -> str | None:
    rel = path.relative_to(root)
    if rel.parts[0] in ("main.rs", "lib.rs", "bin"):
        return None
    return rel.parts[0].removesuffix(".rs")


TEST_FILE_MOD = re.compile(r"^#\[cfg\(test\)\]\s*\n\s*(pub(\(crate\))?\s+)?mod\s+(\w+)\s*;", re.M)


def test_files() -> set[pathlib.Path]:
    """The files of out-of-line test modules (`#[cfg(test)] mod tests;` beside its parent)."""
    found = set()
    for path in root.rglob("*.rs"):
        parent = path.parent if path.name in ("mod.rs", "lib.rs", "main.rs") else path.with_suffix("")
        for m in TEST_FILE_MOD.finditer(path.read_text()):
            found.update({parent / f"{m.group(3)}.rs", parent / m.group(3) / "mod.rs"})
    return found


edges: dict[str, dict[str, list[str]]] = {}
skipped = test_files()
for path in sorted(root.rglob("*.rs")):
    src = module_of(path)
    if src is None or path in skipped:
        continue
    edges.setdefault(src, {})
    text = non_test(path.read_text())
    names = set(USE.findall(text))
    for g in GROUP.findall(text):
        names.update(n.strip().split("::")[0] for n in g.split(",") if n.strip())
    for dst in names:
        if dst != src and dst not in ("self",):
            where = [f"{path}:{n + 1}" for n, line in enumerate(text.splitlines()) if re.search(rf"crate::(\{{[^}}]*)?\b{dst}\b", line)]
            edges[src].setdefault(dst, []).extend(where or [str(path)])

# Tarjan's strongly connected components.
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]


def visit(v: str) -> None:
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in edges.get(v, {}):
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        sccs.append(comp)


sys.setrecursionlimit(10000)
for v in sorted(edges):
    if v not in index:
        visit(v)

for src in sorted(edges):
    print(f"{src} -> {', '.join(sorted(edges[src])) or '(nothing)'}")
broken = [(a, b) for a, bs in sorted(forbidden.items()) for b in sorted(bs) if b in edges.get(a, {})]
for a, b in broken:
    print(f"FORBIDDEN: {a} -> {b}: {', '.join(edges[a][b][:3])}")
circles = [sorted(c) for c in sccs if len(c) > 1]
if broken:
    sys.exit(1)
if not circles:
    print(f"no circle among {len(edges)} modules of {root}")
    sys.exit(0)
for c in circles:
    print(f"CIRCLE: {' <-> '.join(c)}")
    for a in c:
        for b in c:
            if b in edges.get(a, {}):
                print(f"  {a} -> {b}: {', '.join(edges[a][b][:3])}")
sys.exit(1)
