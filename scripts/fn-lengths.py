#!/usr/bin/env python3
"""Lists the longest functions outside tests by raw lines (signature to closing brace, blank and
comment lines included), the stricter reading of the house rule scripts/check-shape.sh holds
with clippy's code-line count.

    python3 scripts/fn-lengths.py [N]          # the N longest (default 10) in src/ and crates/*/src/
    python3 scripts/fn-lengths.py --max 70     # exits 1 naming every function over 70 lines

A brace matcher over the text (strings and char literals blanked, `//` comments cut), not a
parser: good enough to rank, and it says which file and line to look at. Test code is left out:
an item under `#[cfg(test)]` (a `mod tests { .. }` of any visibility or name, a helper), and a
module's file declared `#[cfg(test)] mod name;` (its tests or fuzz targets in a file of their own).
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FN = re.compile(r"\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")
CFG_TEST = re.compile(r"\s*#\[cfg\(test\)\]")
ATTR = re.compile(r"\s*#!?\[")
MOD_FILE = re.compile(r"\s*(pub(\([^)]*\))?\s+)?mod\s+(\w+)\s*;")


def code(line: str) -> str:
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split("//")[0]


def body_end(lines, i):
    """The index of the line closing the item that starts at line i, or None for an item without
    a body (a declaration ending in `;`)."""
    depth, started = 0, False
    for j in range(i, len(lines)):
        c = code(lines[j])
        if not started and ";" in c and "{" not in c:
            return None
        for ch in c:
            depth += {"{": 1, "}": -1}.get(ch, 0)
            started = started or ch == "{"
        if started and depth == 0:
            return j
    return None


def test_items(lines):
    """The line ranges of the items under `#[cfg(test)]`, and the names of the modules declared
    under it without a body (their own files)."""
    ranges, mods = [], []
    for i, line in enumerate(lines):
        if not CFG_TEST.match(line):
            continue
        k = i + 1
        while k < len(lines) and (ATTR.match(lines[k]) or not lines[k].strip()):
            k += 1
        if k == len(lines):
            break
        m = MOD_FILE.match(lines[k])
        if m:
            mods.append(m.group(3))
            continue
        end = item_end(lines, k)
        if end is not None:
            ranges.append((i, end))
    return ranges, mods


def item_end(lines, k):
    """The line closing the item at line k, found by rustfmt's layout (the first `}` at the item's
    own indentation) rather than by counting braces: a test module's multi-line string literals
    would throw the count off."""
    c = code(lines[k])
    if ";" in c and "{" not in c:
        return None
    if "{" in c and c.count("{") == c.count("}"):
        return k
    close = lines[k][: len(lines[k]) - len(lines[k].lstrip())] + "}"
    return next((j for j in range(k + 1, len(lines)) if lines[j].rstrip() == close), None)


def children_dir(path: pathlib.Path) -> pathlib.Path:
    """Where the files of the modules `path` declares live."""
    if path.name in ("mod.rs", "lib.rs", "main.rs"):
        return path.parent
    return path.with_suffix("")


def lengths(path: pathlib.Path, lines, tests):
    for i, line in enumerate(lines):
        f = FN.match(line)
        if not f or any(a <= i <= b for a, b in tests):
            continue
        end = body_end(lines, i)
        if end is not None:
            yield end - i + 1, f"{path.relative_to(ROOT)}:{i + 1} {f.group(6)}"


def found():
    files = sorted(p for p in [*ROOT.glob("src/**/*.rs"), *ROOT.glob("crates/*/src/**/*.rs")])
    parsed = {p: p.read_text().split("\n") for p in files}
    excluded = set()
    ranges = {}
    for p, lines in parsed.items():
        ranges[p], mods = test_items(lines)
        for name in mods:
            d = children_dir(p)
            excluded.update({d / f"{name}.rs", d / name / "mod.rs", *(d / name).glob("**/*.rs")})
    # A module's tests in a file named tests.rs are tests too, however it is declared.
    return sorted(
        (x for p in files if p not in excluded and p.name != "tests.rs" for x in lengths(p, parsed[p], ranges[p])),
        reverse=True,
    )


def main(argv):
    if argv[:1] == ["--max"]:
        limit = int(argv[1])
        over = [(n, where) for n, where in found() if n > limit]
        for n, where in over:
            print(f"{where}: {n} lines, over {limit}", file=sys.stderr)
        return 1 if over else 0
    for n, where in found()[: int(argv[0]) if argv else 10]:
        print(n, where)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
