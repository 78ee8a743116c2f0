"""Charts on a page: draw each one so that a chart that cannot be drawn is a line in the report, never an
exception, and embed the drawn PNGs. Shared by the run and sweep pages (render.py) and the leaderboard.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from effbench.report import html as H

Plot = tuple[Path, str]  # (png path, caption)


def draw(made: list[Plot], problems: list[str], caption: str, fn: Callable[[], Path]) -> None:
    """Draw one chart; a failure becomes a line in the report, not an exception."""
    try:
        made.append((fn(), caption))
    except ImportError as e:
        problems.append(f"{caption}: not drawn, matplotlib is not importable ({e})")
    except Exception as e:  # noqa: BLE001 - one chart must never cost the report
        problems.append(f"{caption}: not drawn ({type(e).__name__}: {e})".splitlines()[0])


def images(plots: Sequence[Plot]) -> list[str]:
    return [H.image(p.read_bytes(), alt=p.stem.replace("_", " "), caption=cap) for p, cap in plots if p.is_file()]
