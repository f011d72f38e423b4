#!/usr/bin/env python3
"""Lists the longest functions outside tests by raw lines (signature to closing brace, blank and
comment lines included), the stricter reading of the house rule scripts/check-shape.sh holds
with clippy's code-line count.

    python3 scripts/fn-lengths.py [N]    # the N longest (default 10) in src/ and crates/*/src/

A brace matcher over the text (strings and char literals blanked, `//` comments cut), not a
parser: good enough to rank, and it says which file and line to look at.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FN = re.compile(r"\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")
TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*\n\s*mod tests")


def code(line: str) -> str:
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split("//")[0]


def lengths(path: pathlib.Path):
    text = path.read_text()
    m = TEST_MOD.search(text)
    lines = (text[: m.start()] if m else text).split("\n")
    for i, line in enumerate(lines):
        f = FN.match(line)
        if not f:
            continue
        depth, started = 0, False
        for j in range(i, len(lines)):
            c = code(lines[j])
            if not started and ";" in c and "{" not in c:
                break  # a declaration without a body
            for ch in c:
                depth += {"{": 1, "}": -1}.get(ch, 0)
                started = started or ch == "{"
            if started and depth == 0:
                yield j - i + 1, f"{path.relative_to(ROOT)}:{i + 1} {f.group(6)}"
                break


# A module's tests in a file of their own (`#[cfg(test)] mod tests;`) are tests too.
files = [p for p in [*ROOT.glob("src/**/*.rs"), *ROOT.glob("crates/*/src/**/*.rs")] if p.name != "tests.rs"]
found = sorted((x for p in files for x in lengths(p)), reverse=True)
for n, where in found[: int(sys.argv[1]) if len(sys.argv) > 1 else 10]:
    print(n, where)
