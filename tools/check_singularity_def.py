#!/usr/bin/env python3
"""Validate an Apptainer/Singularity definition file without Apptainer.

    python tools/check_singularity_def.py --portable singularity.def   # also builds on Singularity 3.x
    python tools/check_singularity_def.py tests/fixtures/container/singularity-*.def   # each must fail
    python tools/check_singularity_def.py --section environment singularity.def        # print one section

Checks, each reported as `FILE:LINE: problem` (exit 1 when any, 0 when none):
  - the header has `Bootstrap:` (one of BOOTSTRAPS: the image must come from the Dockerfile's
    build, not a second recipe) and `From:`;
  - every `%section` is one Apptainer knows, none is repeated, the required ones (REQUIRED) are
    present and not empty;
  - every `{{ NAME }}` template variable is declared as NAME=default in %arguments, and every
    declared argument is used;
  - %labels lines are `KEY VALUE`;
  - with --portable: no %arguments and no `{{ }}` (Apptainer >= 1.2 only; Singularity 3.x would
    leave `{{ NAME }}` in the file literally), so one definition builds on both families.
`--section NAME` prints that section's body instead (the image smoke test runs %environment and
%test in the Docker image to mimic `apptainer test` where there is no Apptainer).
Only the standard library is used, so CI can run it before anything is installed.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

# Apptainer's definition-file sections (Apptainer user guide, "Definition Files"); the %app* ones
# take the app's name as an argument.
SECTIONS = {"arguments", "setup", "files", "environment", "post", "runscript", "startscript", "test", "labels", "help"}
APP_SECTIONS = {"appfiles", "appinstall", "appenv", "apphelp", "applabels", "apprun", "appstart", "apptest"}
REQUIRED = ("runscript", "test", "labels", "help")
BOOTSTRAPS = ("docker-archive", "docker-daemon")

_SECTION_RE = re.compile(r"^%(\w+)\b(.*)$")
_TEMPLATE_RE = re.compile(r"\{\{\s*([^}]*?)\s*\}\}")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ARGUMENT_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


@dataclass
class Section:
    name: str
    line: int
    body: list[tuple[int, str]] = field(default_factory=list)

    def has_content(self) -> bool:
        return any(text.strip() and not text.strip().startswith("#") for _, text in self.body)


@dataclass
class Parsed:
    header: dict[str, tuple[int, str]]
    sections: list[Section]


def parse(text: str) -> tuple[Parsed, list[tuple[int, str]]]:
    """Split a definition file into header keywords and sections; problems found while parsing."""
    problems: list[tuple[int, str]] = []
    header: dict[str, tuple[int, str]] = {}
    sections: list[Section] = []
    current: Section | None = None
    for lineno, line in enumerate(text.splitlines(), start=1):
        m = _SECTION_RE.match(line)
        if m:
            current = Section(m.group(1).lower(), lineno)
            sections.append(current)
            continue
        if current is not None:
            current.body.append((lineno, line))
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition(":")
        if not sep or not key.strip():
            problems.append((lineno, f"header line is not `Keyword: value`: {stripped!r}"))
            continue
        key = key.strip().lower()
        if key in header:
            problems.append((lineno, f"header keyword {key!r} repeated (first on line {header[key][0]})"))
        header[key] = (lineno, value.strip())
    return Parsed(header, sections), problems


PORTABLE_PROBLEM = "needs Apptainer >= 1.2 (Singularity 3.x does not expand it)"


def not_portable(text: str, parsed: Parsed) -> list[tuple[int, str]]:
    """What Singularity 3.x cannot build: %arguments and `{{ }}` templating (Apptainer >= 1.2)."""
    problems = [(s.line, f"%arguments {PORTABLE_PROBLEM}") for s in parsed.sections if s.name == "arguments"]
    for lineno, line in enumerate(text.splitlines(), start=1):
        if _TEMPLATE_RE.search(line):
            problems.append((lineno, f"{{{{ }}}} templating {PORTABLE_PROBLEM}"))
    return problems


def check(text: str, portable: bool = False) -> list[tuple[int, str]]:
    """Every problem in a definition file, as (line, message), in line order. `portable`: also
    reject what only Apptainer >= 1.2 understands (%arguments, `{{ }}` templating)."""
    parsed, problems = parse(text)
    if portable:
        problems += not_portable(text, parsed)
    by_name = {s.name: s for s in parsed.sections}
    problems += check_header(parsed)
    problems += check_sections(parsed, by_name)
    declared, argument_problems = declared_arguments(by_name.get("arguments"))
    problems += argument_problems + check_templates(text, declared)
    problems += check_labels(by_name.get("labels"))
    return sorted(problems)


def check_header(parsed: Parsed) -> list[tuple[int, str]]:
    """`Bootstrap:` from the Dockerfile's image (BOOTSTRAPS) and a `From:`."""
    problems = []
    bootstrap = parsed.header.get("bootstrap")
    if bootstrap is None:
        problems.append((1, "no `Bootstrap:` header"))
    elif bootstrap[1] not in BOOTSTRAPS:
        problems.append((bootstrap[0], f"Bootstrap: {bootstrap[1]} is not one of {', '.join(BOOTSTRAPS)} "
                                       "(build from the image the Dockerfile makes)"))  # fmt: skip
    if "from" not in parsed.header:
        problems.append((1, "no `From:` header"))
    return problems


def check_sections(parsed: Parsed, by_name: dict[str, Section]) -> list[tuple[int, str]]:
    """Known sections, none repeated, the REQUIRED ones present and not empty."""
    problems = []
    seen: dict[str, int] = {}
    for s in parsed.sections:
        if s.name in APP_SECTIONS:
            continue
        if s.name not in SECTIONS:
            problems.append((s.line, f"unknown section %{s.name}"))
            continue
        if s.name in seen:
            problems.append((s.line, f"section %{s.name} repeated (first on line {seen[s.name]})"))
        seen.setdefault(s.name, s.line)
    for name in REQUIRED:
        if name not in by_name:
            problems.append((1, f"required section %{name} is missing"))
        elif not by_name[name].has_content():
            problems.append((by_name[name].line, f"required section %{name} is empty"))
    return problems


def declared_arguments(arguments: Section | None) -> tuple[dict[str, int], list[tuple[int, str]]]:
    """%arguments' NAME=default lines as {NAME: line}, and a problem per malformed line."""
    declared: dict[str, int] = {}
    problems = []
    for lineno, line in arguments.body if arguments else []:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        m = _ARGUMENT_RE.match(stripped)
        if not m:
            problems.append((lineno, f"%arguments line is not NAME=default: {stripped!r}"))
            continue
        declared[m.group(1)] = lineno
    return declared, problems


def check_templates(text: str, declared: dict[str, int]) -> list[tuple[int, str]]:
    """Every `{{ NAME }}` a valid name declared in %arguments, and every declared argument used."""
    problems = []
    used: set[str] = set()
    for lineno, line in enumerate(text.splitlines(), start=1):
        for m in _TEMPLATE_RE.finditer(line):
            name = m.group(1)
            if not _NAME_RE.match(name):
                problems.append((lineno, f"template variable {{{{ {name} }}}} is not a valid name"))
                continue
            used.add(name)
            if name not in declared:
                problems.append((lineno, f"template variable {{{{ {name} }}}} is not declared in %arguments"))
    for name, lineno in declared.items():
        if name not in used:
            problems.append((lineno, f"argument {name} is declared but never used as {{{{ {name} }}}}"))
    return problems


def check_labels(labels: Section | None) -> list[tuple[int, str]]:
    """%labels lines are `KEY VALUE`."""
    problems = []
    for lineno, line in labels.body if labels else []:
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and len(stripped.split(None, 1)) < 2:
            problems.append((lineno, f"%labels line needs a key and a value: {stripped!r}"))
    return problems


def section_text(text: str, name: str) -> str | None:
    """The body of %name, dedented by its first line's indentation; None when absent."""
    parsed, _ = parse(text)
    for s in parsed.sections:
        if s.name == name:
            lines = [t for _, t in s.body]
            while lines and not lines[-1].strip():
                lines.pop()
            indent = min((len(t) - len(t.lstrip()) for t in lines if t.strip()), default=0)
            return "\n".join(t[indent:] for t in lines) + "\n"
    return None


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    if argv[0] == "--section":
        if len(argv) != 3:
            print("usage: check_singularity_def.py --section NAME FILE", file=sys.stderr)
            return 2
        body = section_text(Path(argv[2]).read_text(encoding="utf-8"), argv[1].lstrip("%"))
        if body is None:
            print(f"{argv[2]}: no %{argv[1]} section", file=sys.stderr)
            return 1
        sys.stdout.write(body)
        return 0
    portable = argv[0] == "--portable"
    status = 0
    for name in argv[1:] if portable else argv:
        path = Path(name)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            print(f"{path}: cannot read ({e.strerror})")
            status = 1
            continue
        problems = check(text, portable=portable)
        for lineno, message in problems:
            print(f"{path}:{lineno}: {message}")
        if problems:
            status = 1
        else:
            print(f"{path}: ok")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
