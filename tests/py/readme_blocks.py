"""Prints one named code block of a Markdown file, as the file has it.

A block is named by the second word of its fence's info string: README.md's
```` ```js connect.mjs ```` is the block `connect.mjs` (GitHub renders the first word as the
language and ignores the rest). tests/readme_test.sh runs the README's examples this way, so
a README that drifts from the code fails the tests.

    python3 tests/py/readme_blocks.py README.md connect.mjs   # the block, on stdout
    python3 tests/py/readme_blocks.py README.md               # the names, one a line

Exits 1 when the block is missing or named twice.
"""

import re
import sys

FENCE = re.compile(r"^(`{3,})\s*(\S+)?\s*(\S+)?\s*$")


def blocks(text):
    """Yields (name, body) for every fenced block whose info string has a second word."""
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i].rstrip("\n"))
        if not m:
            i += 1
            continue
        fence, name = m.group(1), m.group(3)
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        if name:
            yield name, "".join(body)


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 64
    with open(argv[1], encoding="utf-8") as f:
        found = list(blocks(f.read()))
    if len(argv) == 2:
        for name, _ in found:
            print(name)
        return 0
    matches = [body for name, body in found if name == argv[2]]
    if len(matches) != 1:
        print(f"{argv[1]}: {len(matches)} blocks named {argv[2]} (want exactly one)", file=sys.stderr)
        return 1
    sys.stdout.write(matches[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
