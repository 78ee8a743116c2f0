"""The options of `run`, `sweep` and `doctor`, generated from RunConfig's fields (as torchtitan derives its
CLI from its job_config dataclasses): a field's name is the option's (`batch_size` -> `--batch-size`, a bool
`--x/--no-x`), its type the option's, its docstring and `Range` the help, its metadata the rest (`env`,
`metavar`, `names`). Adding a run option is adding a RunConfig field; the commands declare only what is theirs
(`--smoke`, `--quiet`, a sweep's `--preset`), and docs/cli.md's tables are drawn from the same (tools/gen_cli_docs.py).

    @with_config_options(config_options(exclude=("smoke",)))
    def run(ctx: typer.Context, *, smoke: Annotated[bool, typer.Option(...)] = False, **given: Any) -> None: ...

Every generated option defaults to None, so a command passes on only what was typed (`v is not None`) and
RunConfig resolves the rest. Torch-free: `effbench --help` builds these.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from effbench.config import RunConfig, _num, option_name

F = TypeVar("F", bound=Callable[..., Any])
_DEFAULT = re.compile(r"\s*\[default: (.*?)\]")


@functools.cache
def field_docs(cls: type = RunConfig) -> dict[str, str]:
    """Each field's docstring (the string literal under it), read from the class's source as tyro and
    torchtitan do: Python keeps no attribute docstrings at runtime."""
    import sys

    try:
        source = Path(sys.modules[cls.__module__].__file__ or "").read_text(encoding="utf-8")
    except OSError:  # installed without sources: options without help, rather than no CLI
        return {}
    (node,) = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == cls.__name__]
    docs: dict[str, str] = {}
    for stmt, after in zip(node.body, node.body[1:], strict=False):  # each statement and the one under it
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[stmt.target.id] = inspect.cleandoc(after.value.value)
    return docs


@dataclasses.dataclass(frozen=True)
class FieldHelp:
    """A field's docstring taken apart: the help sentence, the default in words, the docs-only detail."""

    text: str  # first paragraph, one line, without its [default: ...]
    default: str | None  # "[default: X]"'s X, written or from the field's value; None when there is none
    detail: str  # the later paragraphs, one line (docs/cli.md only)


def field_help(name: str) -> FieldHelp:
    f = _fields()[name]
    doc = field_docs().get(name) or ""  # tests/contracts/test_options.py: every field has one
    first, *rest = [" ".join(p.split()) for p in doc.split("\n\n")]
    m = _DEFAULT.search(first)
    written = m.group(1) if m else None
    text = _DEFAULT.sub("", first).strip()
    names = f.metadata.get("names")
    if names is not None:
        text = f"{text} {names()}"
    default = written if written is not None else _show(f.default)
    env = f.metadata.get("env")
    if env:
        default = f"{default}; env {env}"
    return FieldHelp(text, default, " ".join(rest))


def _show(value: Any) -> str | None:
    """A field's default as a user types it: ./data, on, 0.0005."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, Path):
        return str(value) if value.is_absolute() else f"./{value}"
    if isinstance(value, (int, float)):
        return _num(value)
    return str(value)


@functools.cache
def _fields() -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(RunConfig)}


def option_help(name: str, extra: str = "") -> str:
    """--help text: the docstring's sentence, then `extra` (what this command does with it), the default
    and the declared range, the range being what RunConfig validates against."""
    h = field_help(name)
    parts = [h.text, extra]
    if h.default is not None:
        parts.append(f"[default: {h.default}]")
    rng = _fields()[name].metadata.get("range")
    if rng is not None:
        parts.append(f"[range: {rng.text()}]")
    return " ".join(p for p in parts if p)


def is_field(name: str) -> bool:
    return name in _fields()


def is_bool_field(name: str) -> bool:
    return _fields()[name].type in ("bool", "bool | None")


def field_kind(name: str) -> type:
    if _fields()[name].metadata.get("text"):  # parsed by RunConfig itself (--warmup-steps auto|N)
        return str
    t = str(_fields()[name].type).replace(" | None", "")
    return {"int": int, "float": float, "bool": bool}.get(t, str)  # str and Path: the text as typed


def config_option(name: str, *, as_text: bool = False, extra: str = "") -> inspect.Parameter:
    """The option of field `name`: its own type (`as_text`: the text, for a command that parses it itself,
    as a list 1,2,4), defaulting to None so that only what was typed reaches the command."""
    meta = _fields()[name].metadata
    decls: list[str] = []
    if is_bool_field(name) and not as_text:
        flag = option_name(name)
        decls.append(f"{flag}/--no-{flag[2:]}")
    kind: type = str if as_text else field_kind(name)
    info = typer.Option(
        *decls,
        help=option_help(name, extra),
        show_default=False,
        envvar=meta.get("env"),
        metavar=meta.get("metavar"),
    )
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[kind | None, info]
    )


def config_options(
    only: Iterable[str] | None = None,
    *,
    exclude: Iterable[str] = (),
    as_text: Iterable[str] = (),
    extra: dict[str, str] | None = None,
) -> list[inspect.Parameter]:
    """Options for RunConfig's fields (`only` these, in that order, or all in declaration order, less
    `exclude`); `as_text` ones take the text; `extra` adds a command's own words to a field's help."""
    names = list(only) if only is not None else [n for n in _fields() if n not in set(exclude)]
    texts, extra = set(as_text), extra or {}
    return [config_option(n, as_text=n in texts, extra=extra.get(n, "")) for n in names]


def with_config_options(options: list[inspect.Parameter]) -> Callable[[F], F]:
    """Give a command taking `**given` the generated options: its own parameters first (ctx), then these,
    then its keyword-only ones (what only it declares). Typer reads `__signature__` (inspect.signature)."""

    def wrap(func: F) -> F:
        own = inspect.signature(func, eval_str=True).parameters.values()
        head = [p for p in own if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        tail = [p for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY]
        clash = {p.name for p in options} & {p.name for p in (*head, *tail)}
        assert not clash, f"{func.__name__} declares {clash} itself and from RunConfig"
        func.__signature__ = inspect.Signature([*head, *options, *tail])  # type: ignore[attr-defined]
        return func

    return wrap
