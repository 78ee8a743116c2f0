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
    for name in (
        "effbench.cli.app",
        "effbench.run.launch",
        "effbench.run.rank",
        "effbench.run.folder",
        "effbench.data.cifar",
        "effbench.report.tables",
    ):
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
    "effbench.arch_names",
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
    "__main__.py": "the console script and python -m effbench: signals held while the CLI is imported",
    "errors.py": "EffbenchError, the one-line error every stage raises",
    "fmt.py": "how every table prints a value",
    "redact.py": "what a secret looks like: every writer of a record, a report, a line or an upload hides it",
    "config.py": "RunConfig, validated where declared",
    "datasets.py": "the dataset catalog, read by config, data, preflight and --help (torch-free)",
    "archs.py": "the architecture names and metadata, read by config and models (torch-free)",
    "arch_names.py": "torchvision's and timm's model names, generated: archs.py checks --arch without importing them",
    "recipes.py": "the --augment recipes, read by config and every loader (torch-free)",
    "results.py": "the run folder's files: atomic writes, the results reader",
    "schema.py": "the pydantic schema of results.json and sweep.json",
    "safe_files.py": "the one bounded reader of files effbench reads back (JSON and CSV)",
    "liveness.py": "whether a record's writer still lives, read by every reader of results.json and sweep.json",
    "troubleshooting.py": "the anchors of docs/troubleshooting.md, read by cli, preflight and the verdict (torch-free)",
}


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at module level or inside functions (a lazy import is
    still a dependency), relative imports resolved; `from pkg import sub` imports the submodule pkg.sub,
    `from pkg import name` the package's __init__ (a child reading its parent's __init__ while that
    __init__ imports the child is a circle); imports under `if TYPE_CHECKING:` are not run, so not counted."""
    root = package.parent
    modules = {}
    for f in package.rglob("*.py"):
        name = ".".join(f.relative_to(root).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = f
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, f in modules.items():
        pkg = name if f.name == "__init__.py" else name.rpartition(".")[0]
        skip: set[int] = set()
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if _is_type_checking(node):
                skip |= {id(n) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                # `from pkg import sub` imports the submodule; `from pkg import name` needs pkg's __init__
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in modules:  # a name inside a module: the module
                    t = t.rpartition(".")[0]
                if t and t != name:
                    graph[name].add(t)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_sees_lazy_imports_and_a_circle(tmp_path):
    # guards the graph itself on a package made here: a lazy import closes a circle, TYPE_CHECKING does not
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.a"}
    assert "pkg.a" not in graph["pkg.c"]
    assert circles(graph) == [["pkg.a", "pkg.sub.b"]]


def test_the_package_has_no_import_circle():
    assert circles(import_graph()) == []


def test_run_imports_nothing_from_report():
    # a lower floor never imports a higher one: the caller draws the reports from the settled outcome (issue 24)
    upward = sorted(
        f"{m} -> {t}"
        for m, targets in import_graph().items()
        if m == "effbench.run" or m.startswith("effbench.run.")
        for t in targets
        if t == "effbench.report" or t.startswith("effbench.report.")
    )
    assert upward == []
