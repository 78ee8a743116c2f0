"""Sort tests/test_*.py into tests/unit/, tests/e2e/ and tests/contracts/, renaming the files named after
an issue or a round to what they test, and fix what the move breaks (issue 24, item 6).

    .venv/bin/python tools/reorg_tests.py --dry-run   # print the plan and the checks, change nothing
    .venv/bin/python tools/reorg_tests.py             # git mv + fixes, on a clean checkout; then commit

unit/       a module or pure function alone (fakes, small in-process data)
e2e/        the CLI or a training run end to end (`effbench run`/`sweep` in or out of process, torchrun)
contracts/  the CLI surface (options, errors, exit codes), file formats, documented guarantees, the docs,
            packaging, the image and its linters

Besides the `git mv`s it
- makes the repo root two levels up in every moved file (`Path(__file__).resolve().parents[1]` and
  `.parent.parent` become `.parents[2]`), and lists any other `__file__` use for review;
- makes tests/conftest.py put tests/ and the three folders on sys.path, so `import fakedata`,
  `from clitools import invoke` and `from test_across_runs import make_run` work whichever file pytest
  collects first (pytest's default import mode names a test module by its file name: names stay unique);
- rewrites `tests/test_x.py` to its new path, and a renamed file's module name (`test_hardening_r3`,
  `test_hardening_r3.py`) to its new one, in every tracked text file (docs/guarantees.md, docs/, .ci/,
  pyproject.toml comments, effbench/ comments, tools/, the tests themselves);
- adds the three folders to docs/architecture.md's tree.

It refuses to start (exit 1, nothing changed) on a tests/test_*.py the table below does not name (a file
added meanwhile: give it a row and run again) or a rename that would clash. It goes on, then exits 1, on a
named file that is gone, a `tests/...py` path left dangling in a tracked file, or a `__file__` use it does
not know. Run a second time, it does nothing; run after a merge that brought a file back to the top of tests/
(a branch that still had it there), it moves that file alone, with the same fixes.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

KINDS = ("unit", "e2e", "contracts")

# file -> (folder, new name or None to keep it)
TABLE: dict[str, tuple[str, str | None]] = {
    # unit: a module alone
    "test_analysis.py": ("unit", None),
    "test_catalog.py": ("unit", None),
    "test_config.py": ("unit", None),
    "test_container_detection.py": ("unit", None),
    "test_cuda_compat.py": ("unit", None),
    "test_dali.py": ("unit", None),
    "test_data.py": ("unit", None),
    "test_decode.py": ("unit", None),
    "test_download.py": ("unit", None),
    "test_external_models.py": ("unit", None),
    "test_fast_loader.py": ("unit", None),
    "test_flops.py": ("unit", None),
    "test_fmt.py": ("unit", None),
    "test_gpu_paths.py": ("unit", None),
    "test_gpu_truth_measure.py": ("unit", "test_gpu_measurement.py"),
    "test_hardware.py": ("unit", None),
    "test_launch.py": ("unit", None),
    "test_models.py": ("unit", None),
    "test_monitor.py": ("unit", None),
    "test_observe.py": ("unit", None),
    "test_preflight.py": ("unit", None),
    "test_profiling.py": ("unit", None),
    "test_recipes.py": ("unit", None),
    "test_record.py": ("unit", None),
    "test_results.py": ("unit", None),
    "test_runtime.py": ("unit", None),
    "test_stage_mixin_names.py": ("unit", None),
    "test_stats.py": ("unit", None),
    "test_sweep_report.py": ("unit", None),
    "test_sweepspec.py": ("unit", None),
    "test_truth.py": ("unit", "test_report_figures.py"),
    # e2e: the CLI, a run, a sweep or torchrun end to end
    "test_benchmarks.py": ("e2e", None),
    "test_digits_learns.py": ("e2e", None),
    "test_distributed.py": ("e2e", None),
    "test_fast_e2e.py": ("e2e", "test_run_fast_defaults.py"),
    "test_gpu_truth_runtime.py": ("e2e", "test_gpu_runtime.py"),
    "test_kubernetes.py": ("e2e", None),
    "test_loaders_preset.py": ("e2e", None),
    "test_new_user.py": ("e2e", "test_command_output.py"),
    "test_run_e2e.py": ("e2e", "test_run.py"),
    "test_selftest.py": ("e2e", None),
    "test_signals.py": ("e2e", None),
    "test_sweep_e2e.py": ("e2e", "test_sweep.py"),
    "test_time_to_accuracy.py": ("e2e", None),
    # contracts: CLI surface, file formats, guarantees, docs, packaging, image
    "test_across_runs.py": ("contracts", None),
    "test_cli.py": ("contracts", None),
    "test_cli_feedback.py": ("contracts", None),
    "test_container_files.py": ("contracts", None),
    "test_docs.py": ("contracts", None),
    "test_hardening.py": ("contracts", "test_bad_input.py"),
    "test_hardening_r3.py": ("contracts", "test_hostile_files_and_links.py"),
    "test_options.py": ("contracts", None),
    "test_package.py": ("contracts", None),
    "test_record_model.py": ("contracts", None),
    "test_doc_commands.py": ("contracts", None),
    "test_record_contract.py": ("contracts", None),
    "test_run_reports.py": ("e2e", None),
    "test_result_files.py": ("contracts", None),
    "test_suite_env.py": ("contracts", None),
}

# Files that stay in tests/ (shared by every folder).
STAY = {"conftest.py", "fakedata.py", "clitools.py"}

# In a moved file, the repo root is one level further up.
ROOT_FIXES = [
    (re.compile(r"Path\(__file__\)\.resolve\(\)\.parents\[1\]"), "Path(__file__).resolve().parents[2]"),
    (re.compile(r"Path\(__file__\)\.resolve\(\)\.parent\.parent\b(?!\.)"), "Path(__file__).resolve().parents[2]"),
    (re.compile(r"Path\(__file__\)\.parents\[1\]"), "Path(__file__).parents[2]"),
    (re.compile(r"Path\(__file__\)\.parent\.parent\b(?!\.)"), "Path(__file__).parents[2]"),
    # tests/fixtures stays where it is
    (
        re.compile(r"Path\(__file__\)(\.resolve\(\))?\.parent / \"fixtures\""),
        r'Path(__file__)\1.parents[1] / "fixtures"',
    ),
]
# `__file__` uses that are right after the move: the fixed repo root and tests/fixtures, the file's own folder
# alone (where it is imported from); anything joined onto the own folder is for a person to check.
FILE_OK = re.compile(
    r"Path\(__file__\)(\.resolve\(\))?\.parents\[2\]"
    r"|Path\(__file__\)(\.resolve\(\))?\.parents\[1\] / \"fixtures\""
    r"|Path\(__file__\)(\.resolve\(\))?\.parent(?![.\w])(?! /)"
    r"|os\.path\.dirname\(__file__\)"
)
BARE_FILE = re.compile(r"(?<![\w.])__file__")

CONFTEST_LINE = re.compile(r"^sys\.path\.insert\(0, str\(Path\(__file__\)\.parent\)\).*$", re.M)
CONFTEST_NEW = (
    "# `import fakedata` / `from clitools import invoke` from any test file, and `from test_x import helper`\n"
    "# across tests/unit, tests/e2e and tests/contracts: pytest's default import mode names a test module by\n"
    "# its file name (unique across the folders), so a helper imports the same module pytest collected.\n"
    "_TESTS = Path(__file__).parent\n"
    'sys.path[:0] = [str(_TESTS), *(str(_TESTS / kind) for kind in ("unit", "e2e", "contracts"))]'
)

ARCH_DOC = "docs/architecture.md"
ARCH_LINE = re.compile(r"^tests/ .*$", re.M)
ARCH_ADD = (
    "              unit/ (a module alone) · e2e/ (the CLI, runs, sweeps, torchrun end to end) · contracts/\n"
    "              (options, errors and exit codes, file formats, guarantees, docs, packaging, the image)"
)

SELF = "tools/reorg_tests.py"


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def new_name(old: str) -> str:
    kind, renamed = TABLE[old]
    return f"{kind}/{renamed or old}"


def plan_checks(tests: Path, present: list[str]) -> list[str]:
    """Errors that stop the move before anything changes."""
    errors = []
    for name, (kind, renamed) in TABLE.items():
        if kind not in KINDS:
            errors.append(f"table: {name}: unknown folder {kind!r}")
        if renamed is not None and not re.fullmatch(r"test_\w+\.py", renamed):
            errors.append(f"table: {name}: new name {renamed!r} is not test_*.py")
    finals = [Path(new_name(n)).name for n in present] + sorted(STAY)
    finals += [p.name for kind in KINDS for p in (tests / kind).glob("*.py")]
    dupes = sorted({n for n in finals if finals.count(n) > 1})
    if dupes:
        errors.append(f"two files would share a module name (pytest imports them by file name): {dupes}")
    for old in present:
        target = tests / new_name(old)
        if target.exists():
            errors.append(f"{target} exists already")
    # a renamed module name is rewritten as a word: it must not also be a test function's name
    stems = {Path(o).stem for o, (_, r) in TABLE.items() if r}
    for path in sorted(tests.rglob("*.py")):
        for stem in stems & set(re.findall(r"def (test_\w+)", path.read_text(encoding="utf-8"))):
            errors.append(f"{path}: a function is named {stem}, the module name to rewrite")
    return errors


def fix_roots(path: Path) -> tuple[int, list[str]]:
    """Repo-root paths one level up; returns (fixes, lines with an unknown __file__ use)."""
    text = path.read_text(encoding="utf-8")
    count = 0
    for pattern, repl in ROOT_FIXES:
        text, n = pattern.subn(repl, text)
        count += n
    path.write_text(text, encoding="utf-8")
    unknown = []
    for i, line in enumerate(text.splitlines(), 1):
        if BARE_FILE.search(FILE_OK.sub("", line)):
            unknown.append(f"{path}:{i}: {line.strip()}")
        elif '"fixtures"' in line and not re.search(r'(parents\[1\]|"tests") / "fixtures"', line):
            unknown.append(f"{path}:{i}: {line.strip()}")  # tests/fixtures reached some other way
    return count, unknown


def rewrite_references(repo: Path, moved: list[str]) -> dict[str, int]:
    """tests/test_x.py -> tests/<kind>/<name>.py, and a renamed module's name, in every tracked text file."""
    path_subs = [(re.compile(rf"(?<![\w/.-])tests/{re.escape(old)}(?!\w)"), f"tests/{new_name(old)}") for old in moved]
    name_subs = [
        (re.compile(rf"\b{re.escape(Path(old).stem)}\b"), Path(TABLE[old][1] or old).stem)
        for old in moved
        if TABLE[old][1]
    ]
    changed = {}
    for rel in git("ls-files", "-z", cwd=repo).split("\0"):
        if not rel or rel == SELF:
            continue
        path = repo / rel
        if not path.is_file() or path.is_symlink():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new, count = text, 0
        for pattern, repl in path_subs + name_subs:
            new, n = pattern.subn(repl, new)
            count += n
        if count:
            path.write_text(new, encoding="utf-8")
            changed[rel] = count
    return changed


def dangling_references(repo: Path) -> list[str]:
    """`tests/...py` paths named in tracked files that do not exist after the move."""
    ref = re.compile(r"(?<![\w/.-])(tests/[\w/]+\.py)\b")
    found = []
    for rel in git("ls-files", "-z", cwd=repo).split("\0"):
        if not rel or rel == SELF:
            continue
        path = repo / rel
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        for i, line in enumerate(text.splitlines(), 1):
            for m in ref.finditer(line):
                if not (repo / m.group(1)).exists():
                    found.append(f"{rel}:{i}: {m.group(1)}")
    return found


def apply(repo: Path, tests: Path, moved: list[str]) -> list[str]:
    """Move, fix and rewrite; returns the problems left for a person."""
    errors: list[str] = []
    for kind in KINDS:
        (tests / kind).mkdir(exist_ok=True)
    for old in moved:
        git("mv", f"tests/{old}", f"tests/{new_name(old)}", cwd=repo)

    root_fixes, review = 0, []
    for old in moved:
        n, unknown_uses = fix_roots(tests / new_name(old))
        root_fixes += n
        review += unknown_uses
    print(f"repo root made parents[2] in the moved files: {root_fixes} places")

    conftest = tests / "conftest.py"
    text, n = CONFTEST_LINE.subn(lambda _: CONFTEST_NEW, conftest.read_text(encoding="utf-8"), count=1)
    if n:
        conftest.write_text(text, encoding="utf-8")
        print("tests/conftest.py: tests/ and tests/{unit,e2e,contracts} on sys.path")
    elif "_TESTS / kind" not in text:  # not done by an earlier run either
        errors.append(
            "tests/conftest.py: its `sys.path.insert(0, str(Path(__file__).parent))` line is gone: put "
            "tests/ and tests/{unit,e2e,contracts} on sys.path by hand (cross-folder helper imports)"
        )

    changed = rewrite_references(repo, moved)
    print(f"references rewritten in {len(changed)} tracked files ({sum(changed.values())} places):")
    for rel, count in sorted(changed.items()):
        print(f"  {rel}: {count}")

    arch = repo / ARCH_DOC
    if arch.exists():
        text = arch.read_text(encoding="utf-8")
        m = ARCH_LINE.search(text)
        if m and "contracts/" not in text:
            arch.write_text(text[: m.end()] + "\n" + ARCH_ADD + text[m.end() :], encoding="utf-8")
            print(f"{ARCH_DOC}: the three folders added to the tree")
        elif not m:
            errors.append(f"{ARCH_DOC}: no `tests/` line in the tree: add the three folders by hand")

    for line in review:
        errors.append(f"{line}: a __file__ use this script does not know: check it after the move")
    for ref in dangling_references(repo):
        errors.append(f"{ref}: names a file that does not exist")

    return errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print the plan and the checks, change nothing")
    parser.add_argument("--allow-dirty", action="store_true", help="run on a working tree with changes")
    args = parser.parse_args(argv)

    repo = Path(git("rev-parse", "--show-toplevel", cwd=Path.cwd()).strip())
    tests = repo / "tests"
    present = sorted(p.name for p in tests.glob("test_*.py"))
    unknown = [p for p in present if p not in TABLE]
    moved = [p for p in present if p in TABLE]
    placed = [n for n in TABLE if (tests / new_name(n)).exists()]
    missing = [n for n in TABLE if n not in present and n not in placed]
    if not present:
        print(f"nothing to do: tests/ holds no test_*.py at its top ({len(placed)} of the table's files in place)")
        for name in missing:
            print(f"note: tests/{name}: in the table but in neither place (gone or renamed?)")
        return 0

    if not args.dry_run and not args.allow_dirty and git("status", "--porcelain", cwd=repo).strip():
        print("error: the working tree has changes; commit them first (or --allow-dirty)")
        return 1

    errors = []
    for name in unknown:  # stop before any change: its row decides its folder and whether to fix its paths
        errors.append(f"tests/{name}: not in the table of tools/reorg_tests.py: give it a row, then run again")
    for name in missing:
        errors.append(f"tests/{name}: in the table but not in tests/ (gone or renamed on main?)")
    stop = plan_checks(tests, moved)
    if stop or unknown:
        print("\n".join(f"error: {e}" for e in stop + errors))
        return 1

    width = max(map(len, moved))
    print(
        f"{len(moved)} files to move ({len(placed)} in place already, {len(unknown)} not in the table, "
        f"{len(missing)} named but missing):"
    )
    for kind in KINDS:
        for old in (o for o in moved if TABLE[o][0] == kind):
            note = "  (renamed)" if TABLE[old][1] else ""
            print(f"  tests/{old:<{width}} -> tests/{new_name(old)}{note}")
    if args.dry_run:
        print("\n".join(f"error: {e}" for e in errors) or "no problem found")
        print("dry run: nothing changed")
        return 1 if errors else 0

    errors += apply(repo, tests, moved)
    if errors:
        print(f"\n{len(errors)} problems:")
        print("\n".join(f"error: {e}" for e in errors))
        return 1
    print("done: check `.venv/bin/python -m pytest --collect-only -q | tail -1`, then commit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
