"""The package's shape holds: every module imports, every lazy import inside a function resolves (the CPU
suite never runs CUDA-only functions, so a renamed module would otherwise surface on a user's GPU), the CLI
and the torch-free stages stay torch-free at import, and each stage says what it owns."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import effbench

PACKAGE = Path(effbench.__file__).parent
MODULES = sorted(m.name for m in pkgutil.walk_packages([str(PACKAGE)], prefix="effbench."))


def test_the_walk_finds_the_stages():
    # guards the walk itself: an empty list would make the tests below vacuous
    for name in ("effbench.cli.app", "effbench.run.runner", "effbench.data.cifar", "effbench.report.tables"):
        assert name in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports(name):
    importlib.import_module(name)


def _function_level_imports(path: Path):
    tree = ast.parse(path.read_text())
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("effbench"):
                yield node.lineno, node.module, [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("effbench"):
                        yield node.lineno, a.name, []


def test_every_lazy_import_inside_a_function_resolves():
    broken = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, module, names in _function_level_imports(path):
            try:
                mod = importlib.import_module(module)
            except ImportError as e:
                broken.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {module} ({e})")
                continue
            for n in names:
                if not hasattr(mod, n):
                    try:
                        importlib.import_module(f"{module}.{n}")
                    except ImportError:
                        broken.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {module}.{n} does not exist")
    assert not broken, "\n".join(broken)


TORCH_FREE = [
    "effbench.cli",
    "effbench.config",
    "effbench.datasets",
    "effbench.archs",
    "effbench.recipes",
    "effbench.safe_files",
    "effbench.results",
    "effbench.analysis.efficiency",
    "effbench.analysis.compare",
    "effbench.report.render",
    "effbench.sweep.spec",
    "effbench.launch.plan",
]


@pytest.mark.parametrize("name", TORCH_FREE)
def test_torch_free_modules_do_not_import_torch(name):
    code = f"import sys, {name}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", f"importing {name} imports torch"


def test_each_stage_says_what_it_owns():
    stages = [p for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()]
    assert len(stages) >= 8
    for stage in stages:
        doc = ast.get_docstring(ast.parse((stage / "__init__.py").read_text()))
        assert doc and len(doc) > 40, f"{stage.name}/__init__.py has no docstring saying what it owns"
    top_modules = {p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    assert top_modules == set(TOP_LEVEL), "a module at the package's top must say here why it is not in a stage"


# The package's top holds only what every stage reads and what must stay torch-free below config; everything
# else lives in a stage (a subpackage whose __init__ says what it owns).
TOP_LEVEL = {
    "__main__.py": "python -m effbench",
    "errors.py": "EffbenchError, the one-line error every stage raises",
    "fmt.py": "how every table prints a value",
    "config.py": "RunConfig, validated where declared",
    "datasets.py": "the dataset catalog, read by config, data, preflight and --help (torch-free)",
    "archs.py": "the architecture names and metadata, read by config and models (torch-free)",
    "recipes.py": "the --augment recipes, read by config and every loader (torch-free)",
    "results.py": "the run folder's files: atomic writes, the results reader",
    "schema.py": "the pydantic schema of results.json and sweep.json",
    "safe_files.py": "the one bounded reader of files effbench reads back (JSON and CSV)",
}
