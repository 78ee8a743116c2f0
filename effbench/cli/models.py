"""`effbench models`: every architecture --arch takes, with the facts its library publishes.

    effbench models                          # effbench's own and torchvision's (about 90)
    effbench models --source timm            # timm's (when installed: pip install 'effbench[timm]')
    effbench models --json > models.json     # for scripts

torch and torchvision are imported when the command runs, never for `effbench --help`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from effbench.errors import EffbenchError

SOURCE_CHOICES = ("all", "effbench", "torchvision", "timm")


def models_table(rows: list[dict[str, Any]]) -> str:
    """name | source | params (M) | native px | forward GFLOPs | default weights (pure: rows in, text out).
    What a library does not publish shows as "-", never as 0."""
    from tabulate import tabulate

    def cell(v: Any, fmt: str = "{}") -> str:
        return "-" if v is None else fmt.format(v)

    table = [
        (
            r["name"],
            r["source"],
            cell(None if r["params"] is None else r["params"] / 1e6, "{:.1f}"),
            f"{r['image_size_px']}{' fixed' if r['fixed_image_size'] else ''}",
            cell(r["forward_gflops"], "{:.2f}"),
            cell(r["weights"]),
        )
        for r in rows
    ]
    headers = ["arch", "source", "params_M", "native_px", "fwd_gflops", "imagenet weights"]
    return tabulate(table, headers=headers, tablefmt="simple", disable_numparse=True)


def models(
    source: Annotated[
        str,
        typer.Option(
            help="Catalogs to list: all, effbench, torchvision or timm. all includes timm's only when installed."
        ),
    ] = "effbench,torchvision",
    as_json: Annotated[bool, typer.Option("--json", help="One JSON list on stdout, for scripts.")] = False,
) -> None:
    """List the architectures: name for --arch, source, parameters, native image size, forward GFLOPs, weights."""
    import json

    from effbench.models import catalog

    wanted = tuple(s.strip().lower() for s in source.split(","))
    unknown = [s for s in wanted if s not in SOURCE_CHOICES]
    if unknown:
        raise EffbenchError("--source", f"unknown source {unknown[0]!r}; choose from {', '.join(SOURCE_CHOICES)}")
    if "timm" in wanted and not catalog.timm_installed():
        raise EffbenchError("--source", f"timm is not installed; {catalog.TIMM_HINT}, or use --source torchvision")
    if "all" in wanted:
        wanted = ("effbench", "torchvision", *(("timm",) if catalog.timm_installed() else ()))
    rows = [r.to_dict() for r in catalog.catalog(wanted)]
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    typer.echo(models_table(rows))
    typer.echo(
        f"\n{len(rows)} architectures; use the first column as --arch (params at 1,000 classes; forward GFLOPs at "
        "native_px, 2 per multiply-add: the library's own figure, effbench's own models' counted on the meta device)"
    )
