"""Check the Markdown docs: every relative link names a file that exists, and every #anchor a heading in it.

    python3 tools/check_docs.py                 # README.md and docs/*.md; exit 1 with one line per broken link
    python3 tools/check_docs.py FILE.md ...     # these files only

The same check MkDocs' --strict makes for links, without a site build: run by `make lint` and by
tests/contracts/test_docs.py. Anchors follow GitHub's rule (lower case, punctuation dropped, spaces to hyphens,
a repeated heading gets -1, -2, ...). Links to http(s) or mailto are not fetched (no network here).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a link-like string inside code is not a link)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def shown(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """One message per link in `path` that leads nowhere (or out of `root`)."""
    problems = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            try:
                dest.relative_to(root)
            except ValueError:
                problems.append(f"{shown(path)}: {target}: leaves the repository")
                continue
            if not dest.exists():
                problems.append(f"{shown(path)}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{shown(path)}: {target}: no heading with anchor #{anchor}")
    return problems


@dataclass(frozen=True)
class Block:
    """One fenced code block: its language word (`` for none), the line of its opening fence, its lines, and
    the words of an HTML comment on the line just above the fence (`<!-- gpu -->`: why the docs test cannot
    run it; tests/contracts/test_doc_commands.py)."""

    path: Path
    lang: str
    line: int
    lines: tuple[str, ...]
    marks: tuple[str, ...] = ()


MARK = re.compile(r"^\s*<!--\s*([\w\s-]+?)\s*-->\s*$")


@dataclass(frozen=True)
class Command:
    """One shell command of a block: backslash-continued lines joined; `text` is as written (comments kept)."""

    path: Path
    line: int
    text: str
    block: int  # the line of its block's opening fence
    marks: tuple[str, ...] = ()  # its block's (Block.marks)

    @property
    def key(self) -> str:
        """The command without its trailing comment, runs of blanks as one: what the tests' tables name."""
        return " ".join(strip_comment(self.text.replace("\\\n", " ")).split())


SHELL_LANGS = {"bash", "sh", "shell", "console", "zsh"}


def code_blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, in order."""
    blocks, open_at, lang, body = [], 0, "", []
    fence, marks, previous = "", (), ""
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = FENCE.match(line)
        if not fence and m:
            fence, open_at, body = m.group(1), n, []
            lang = line.strip()[len(fence) :].strip().split(" ")[0]
            mark = MARK.match(previous)
            marks = tuple(mark.group(1).split()) if mark else ()
        elif fence and line.strip().startswith(fence):
            blocks.append(Block(path, lang, open_at, tuple(body), marks))
            fence = ""
        elif fence:
            body.append(line)
        previous = line
    return blocks


def strip_comment(text: str) -> str:
    """`text` less a `#` comment: one that starts a word outside quotes (bash's rule, enough for docs)."""
    quote, prev = "", " "
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and (quote == "'" or text[i - 1] != "\\"):
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and prev.isspace():
            return text[:i].rstrip()
        prev = ch
    return text.rstrip()


def shell_commands(block: Block) -> list[Command]:
    """The commands of a shell block: comment-only and blank lines dropped, `\\` continuations joined."""
    out, pending, start = [], [], 0
    for n, line in enumerate(block.lines, block.line + 1):
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if not pending:
            start = n
        pending.append(line)
        if not strip_comment(line).endswith("\\"):
            out.append(Command(block.path, start, "\n".join(pending).strip(), block.line, block.marks))
            pending = []
    return out


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def main(argv: list[str]) -> int:
    files = [Path(a).resolve() for a in argv] or doc_files()
    problems = [p for f in files for p in broken_links(f)]
    for p in problems:
        print(p)
    print(f"docs: {len(files)} files, {len(problems)} broken links")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
