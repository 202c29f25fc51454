"""Run the book's ```python,checked blocks against the installed blis package.

The Python twin of tests/tests/book.rs (which runs the shell blocks): each
```python,checked block of docs/src/python.md runs, in order, in one fresh
Python process per block, from a scratch folder holding a copy of examples/
(as a reader runs it from the root of a checkout); a block directly followed
by a ```text,output block must print exactly that (trailing spaces
ignored). .ci/run calls it in the Python step, with the wheel installed:

    python docs/check_python.py            # check
    python docs/check_python.py --regenerate   # rewrite the quoted outputs
"""

import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "docs" / "src" / "python.md"


def blocks(lines):
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^\s*(`{3,})(.*)$", lines[i])
        if m:
            fence = m.group(1)
            info = [w.strip() for w in m.group(2).split(",") if w.strip()]
            j = i + 1
            while j < len(lines) and not (
                lines[j].lstrip().startswith(fence) and not lines[j].strip().strip("`")
            ):
                j += 1
            out.append((i, j, info))
            i = j + 1
        else:
            i += 1
    return out


def normalise(s):
    return "\n".join(l.rstrip() for l in s.splitlines()).rstrip()


def main():
    regenerate = "--regenerate" in sys.argv
    lines = CHAPTER.read_text().split("\n")
    bs = blocks(lines)
    scratch = pathlib.Path(tempfile.mkdtemp())
    shutil.copytree(ROOT / "examples", scratch / "examples", ignore=shutil.ignore_patterns("target"))
    failures, replacements, ran = [], [], 0
    for k, (a, b, info) in enumerate(bs):
        if info[:1] != ["python"] or "checked" not in info:
            continue
        ran += 1
        code = "\n".join(lines[a + 1 : b])
        o = subprocess.run([sys.executable, "-c", code], cwd=scratch, capture_output=True, text=True)
        where = f"{CHAPTER.relative_to(ROOT)}:{a + 1}"
        if o.returncode != 0:
            failures.append(f"{where}: exit {o.returncode}\n{o.stderr}")
            continue
        nxt = bs[k + 1] if k + 1 < len(bs) else None
        if nxt and "output" in nxt[2] and all(not l.strip() for l in lines[b + 1 : nxt[0]]):
            want, got = normalise("\n".join(lines[nxt[0] + 1 : nxt[1]])), normalise(o.stdout)
            if want != got:
                if regenerate:
                    replacements.append((nxt[0] + 1, nxt[1], got))
                else:
                    failures.append(f"{where}: the output differs from the book's\n--- the book\n{want}\n--- now\n{got}")
    shutil.rmtree(scratch)
    for start, end, got in sorted(replacements, reverse=True):
        lines[start:end] = got.split("\n") if got else []
    if replacements:
        CHAPTER.write_text("\n".join(lines))
    if ran == 0:
        failures.append(f"{CHAPTER}: no python,checked block")
    if failures:
        print("\n\n".join(failures), file=sys.stderr)
        sys.exit(1)
    print(f"book: {ran} Python blocks of {CHAPTER.relative_to(ROOT)} ran and printed what the book quotes")


if __name__ == "__main__":
    main()
