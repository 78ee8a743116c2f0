"""The docs: a short README that links to one page per topic, no link that leads nowhere, the tables that
copy code kept equal to it. The docs' commands are run by tests/contracts/test_doc_commands.py."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import check_docs  # noqa: E402
import gen_cli_docs  # noqa: E402
import gen_record_docs  # noqa: E402


def test_no_doc_has_a_broken_link():
    problems = [p for f in check_docs.doc_files() for p in check_docs.broken_links(f)]
    assert problems == []


def test_the_link_check_finds_a_missing_file_a_missing_anchor_and_a_link_out(tmp_path):
    (tmp_path / "b.md").write_text("# Real heading\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md#real-heading) [ok2](b.md#twice-1) [web](https://example.org/x)\n"
        "[gone](nope.md) [anchor](b.md#not-there) [out](../../etc/passwd)\n"
        "```\n[in code](nope-either.md)\n```\n"
    )
    problems = check_docs.broken_links(page, root=tmp_path)
    assert [p.split(": ")[1] for p in problems] == ["nope.md", "b.md#not-there", "../../etc/passwd"]


def test_every_troubleshooting_pointer_the_code_prints_leads_to_a_section():
    from effbench import troubleshooting

    page = ROOT / troubleshooting.PAGE
    missing = [a for a in troubleshooting.ANCHORS if a not in check_docs.anchors(page)]
    assert missing == [], f"{troubleshooting.PAGE} has no heading for these anchors"


def test_readme_is_a_front_page_that_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    lines = readme.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: reference belongs in docs/"
    assert max(len(line) for line in check_docs.prose_lines(readme)) <= 120  # a sample's lines may be wider
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in readme, f"README.md does not link docs/{page.name}"
    # the two set-up commands come first
    setup = readme.split("## Set-up")[1].split("```bash")[1].split("```")[0]
    assert [ln.split()[:2] for ln in setup.strip().splitlines()] == [["make", "run"], ["make", "test"]]


def test_the_export_columns_table_is_the_code_s_list():
    from effbench.analysis import export as ex

    page = (ROOT / "docs" / "sweeps-and-reports.md").read_text().split("## Export columns")[1]
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| (.*?) \|$", page, re.M)
    assert rows == list(ex.COLUMN_DOCS)


def test_the_sweep_page_names_every_status_a_cell_can_end_in():
    from effbench.sweep import manifest

    page = (ROOT / "docs" / "sweeps-and-reports.md").read_text()
    ends = page.split("**How a cell ends**")[1].split("\n\n")[0]
    assert [s for s in manifest.CELL_STATUSES if f"`{s}`" not in ends] == []


@pytest.mark.parametrize("script", ["check_docs.py"])
def test_the_docs_check_runs_in_make_lint(script):
    assert f"tools/{script}" in (ROOT / ".ci" / "lint.sh").read_text()


def test_the_cli_reference_is_generated_from_the_cli_and_fresh():
    page = (ROOT / "docs" / "cli.md").read_text()
    assert gen_cli_docs.render(page) == page, "docs/cli.md is stale: run .venv/bin/python tools/gen_cli_docs.py"
    # every option `effbench run --help` offers is in the table (the generator cannot skip one silently)
    from typer.testing import CliRunner

    from effbench.cli.app import app

    help_text = CliRunner().invoke(app, ["run", "--help"], terminal_width=200).output
    run_table = page.split("### `effbench run`")[1].split("### ")[0]
    for opt in set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", help_text)) - {"--help"}:
        assert f"`{opt}" in run_table or f"/ {opt}" in run_table or f", {opt}" in run_table, opt
    # a stale table is caught: one option's help changed by hand
    stale = page.replace("Images per device per step.", "Images per step.")
    assert gen_cli_docs.render(stale) != stale


def test_the_results_json_reference_is_generated_from_the_record_model_and_fresh():
    page = (ROOT / "docs" / "outputs.md").read_text()
    assert gen_record_docs.render(page) == page, (
        "docs/outputs.md is stale: run .venv/bin/python tools/gen_record_docs.py"
    )
    tables = page.split(gen_record_docs.BEGIN)[1].split(gen_record_docs.END)[0]
    # every field of the headline record is there with a meaning, none left blank
    from effbench import schema

    for name in schema.Results.model_fields:
        assert f"| `{name}` |" in tables, name
    assert not re.findall(r"^\| `\w+` \| [^|]+ \|\s*\|$", tables, re.M), "a field without a docstring"
    # a new field shows up, and its docstring is its meaning
    from pydantic import create_model

    grown = create_model("Results", __base__=schema.Results, joules_per_epoch=(float | None, None))
    grown.model_fields["joules_per_epoch"].description = "GPU energy per epoch, J."
    original = schema.Results
    try:
        schema.Results = grown
        fresh = gen_record_docs.render(page)
    finally:
        schema.Results = original
    assert fresh != page and "| `joules_per_epoch` | number or null | GPU energy per epoch, J. |" in fresh
