#!/usr/bin/env python3
"""The image's lock: every package its venv installs, exact version and sha256, per flavour.

    # cu130 (the default flavour, PyPI's torch): what CI builds; run where pip reaches the index
    python3 tools/lock.py generate --flavour cu130 --python-version 3.12      # with Python 3.11
    # cu126 (older drivers): the same with the CUDA 12.6 wheel index and the versions it has
    python3 tools/lock.py generate --flavour cu126 --index-url https://download.pytorch.org/whl/cu126 \\
        --torch 2.14.1+cu126 --torchvision 0.29.1+cu126 --python-version 3.12
    # in the image build (Dockerfile): the venv in parts, one layer each, then exactly the lock
    python3 tools/lock.py install locks/cu130.txt torch --python /opt/venv/bin/python
    /opt/venv/bin/python -m pip freeze --all | python3 tools/lock.py check locks/cu130.txt --ignore pip effbench

`generate` asks pip to resolve (`pip install --dry-run --ignore-installed --report`) torch,
torchvision and effbench's dependencies under constraints.txt, once per Python version the bases
use (the CI base is Debian 12, Python 3.11; nvidia/cuda:*-ubuntu24.04 is Python 3.12), and writes
`locks/<flavour>.txt`: `name==version --hash=sha256:...` with the hash of every wheel it chose
(a wheel per Python version for compiled packages). pip takes the hashes from the index's links;
a package whose index gives none gets no --hash and the header names it; the Dockerfile installs
with --require-hashes, so such a lock stops the build until the hash is added by hand.
`install` installs one part of the lock (PARTS) with `pip install --require-hashes --no-deps`.
`check` compares `pip freeze --all` on stdin with the lock; any difference fails with the list.
Standard library only: it runs in the image build before effbench is installed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def canonical(name: str) -> str:
    """PEP 503 normalised name: pip freeze says Jinja2 and typing_extensions, the lock jinja2 and typing-extensions."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pins(text: str) -> dict[str, str]:
    """name -> version from `name==version` lines (lock or pip freeze); comments and hashes ignored."""
    pins: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "--")):
            continue
        m = LINE.match(line)
        if m is None:
            raise ValueError(f"not a name==version line: {line!r}")
        pins[canonical(m.group(1))] = m.group(2)
    return pins


# The image installs the venv in these parts, one layer each, in this order. A layer's commit holds
# it on disk about three times over (the build container's copy, the blob, the stored layer): one
# 6.3 GB venv layer, then copied into the runtime stage, took the build to 37.4 GiB above its start and
# ran a CI machine out of disk; these parts, not copied, to 15.6 GiB (docs/containers.md "Layers").
PARTS = ("cudnn-cublas", "cuda", "torch", "rest")


def part_of(name: str) -> str:
    """The part a package is installed in: CUDA's two largest libraries, the other NVIDIA and CUDA
    wheels, torch with what is built for it, then the rest (~1.5, 2.2, 2.0 and 0.4 GB for cu130)."""
    name = canonical(name)
    if name.startswith(("nvidia-cudnn", "nvidia-cublas")):
        return "cudnn-cublas"
    if name.startswith(("nvidia-", "cuda-")):
        return "cuda"
    if name in ("torch", "torchvision", "triton"):
        return "torch"
    return "rest"


def entries(text: str) -> list[tuple[str, str]]:
    """(name, the entry's text with its --hash lines) for each pin of a lock, comments dropped."""
    out: list[tuple[str, list[str]]] = []
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if raw[0].isspace():
            if not out:
                raise ValueError(f"a continuation line before any pin: {raw.strip()!r}")
            out[-1][1].append(raw)
            continue
        m = LINE.match(raw)
        if m is None:
            raise ValueError(f"not a name==version line: {raw!r}")
        out.append((canonical(m.group(1)), [raw]))
    return [(name, "\n".join(lines)) for name, lines in out]


def install_command(python: str, requirements: str, extra_index_url: str = "") -> list[str]:
    """pip installs exactly the pins given, each checked against its hash, and resolves nothing."""
    extra = ["--extra-index-url", extra_index_url] if extra_index_url else []
    return [python, "-m", "pip", "install", "--require-hashes", "--no-deps", *extra, "-r", requirements]


def install(args: argparse.Namespace) -> int:
    chosen = [entry for name, entry in entries(Path(args.lock).read_text()) if part_of(name) == args.part]
    if not chosen:
        print(f"lock install: no package of {args.lock} is in part {args.part}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        requirements = Path(tmp) / f"{args.part}.txt"
        requirements.write_text("\n".join(chosen) + "\n")
        print(f"lock install: part {args.part}: {len(chosen)} package(s) of {args.lock}", flush=True)
        return subprocess.run(install_command(args.python, str(requirements), args.extra_index_url)).returncode


def compare(lock: dict[str, str], installed: dict[str, str], ignore: set[str]) -> list[str]:
    """Every difference between the lock and the venv, one line each ([] when they are equal)."""
    ignore = {canonical(n) for n in ignore}
    problems = []
    for name in sorted(set(lock) | set(installed)):
        if name in ignore:
            continue
        want, got = lock.get(name), installed.get(name)
        if want is None:
            problems.append(f"{name}=={got} is installed but not in the lock")
        elif got is None:
            problems.append(f"{name}=={want} is in the lock but not installed")
        elif want != got:
            problems.append(f"{name}: lock {want}, installed {got}")
    return problems


def _report(cmd: list[str], tmp: str) -> list[dict]:
    report = Path(tmp) / "report.json"
    subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                    "--report", str(report), *cmd], check=True)  # fmt: skip
    return json.loads(report.read_text())["install"]


def resolve(args: argparse.Namespace) -> list[dict]:
    """pip's installation report for torch, torchvision and effbench with its `timm`, `dali` and `tracking` extras (the image has them), for this Python."""
    cmd = ["-c", str(ROOT / "constraints.txt")] + (["--extra-index-url", args.index_url] if args.index_url else [])
    with tempfile.TemporaryDirectory() as tmp:
        return _report(
            [*cmd, f"{ROOT}[timm,dali,tracking]", f"torch=={args.torch}", f"torchvision=={args.torchvision}"], tmp
        )


def files_for(args: argparse.Namespace, pins: dict[str, str], python_version: str) -> list[dict]:
    """The files another Python would install for the same pins: pip allows --python-version only
    with --no-deps (or binary-only, which the sdist-only efficientnet-pytorch rules out), so the set
    comes from `resolve` and this only picks each pin's file for that interpreter."""
    cmd = ["--no-deps", "--implementation", "cp", "--python-version", python_version]
    # Every glibc a wheel may name, newest first (pip prefers the first listed): pip 23 does not widen
    # manylinux_2_28 to the older manylinux_2_27 that nvidia-cudnn-cu13's wheels carry. 2.39 is Ubuntu
    # 24.04's glibc (the nvidia/cuda base), the newest the image meets.
    platforms = [f"manylinux_2_{minor}_x86_64" for minor in range(39, 16, -1)]
    platforms += ["manylinux2014_x86_64", "linux_x86_64"]
    for platform in platforms:
        cmd += ["--platform", platform]
    cmd += ["--extra-index-url", args.index_url] if args.index_url else []
    with tempfile.TemporaryDirectory() as tmp:
        return _report([*cmd, "--target", str(Path(tmp) / "t"), *(f"{n}=={v}" for n, v in pins.items())], tmp)


def generate(args: argparse.Namespace) -> int:
    versions: dict[str, str] = {}
    hashes: dict[str, set[str]] = {}
    native = resolve(args)
    pins = {canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in native}
    pins.pop("effbench", None)
    reports = [native] + [files_for(args, pins, py) for py in args.python_version or []]
    for items in reports:
        for item in items:
            name = canonical(item["metadata"]["name"])
            if name == "effbench":
                continue
            version = item["metadata"]["version"]
            if versions.setdefault(name, version) != version:
                raise SystemExit(f"error: {name} resolves to {versions[name]} and {version} for different Pythons")
            digest = ((item.get("download_info") or {}).get("archive_info") or {}).get("hashes", {}).get("sha256")
            hashes.setdefault(name, set())
            if digest:
                hashes[name].add(digest)
    unhashed = sorted(n for n, h in hashes.items() if not h)
    pythons = ", ".join([f"{sys.version_info[0]}.{sys.version_info[1]}", *(args.python_version or [])])
    lines = [
        f"# effbench image lock, flavour {args.flavour}: every package the image's venv installs (effbench",
        "# itself and pip excepted). Generated, do not edit; regenerate with:",
        "#   python3 tools/lock.py generate " + " ".join(sys.argv[2:]),
        f"# torch {args.torch}, torchvision {args.torchvision}, Python {pythons}, under constraints.txt.",
        "# unhashed (the index gave no hash): " + (", ".join(unhashed) if unhashed else "none"),
    ]
    for name in sorted(versions):
        line = f"{name}=={versions[name]}"
        for digest in sorted(hashes[name]):
            line += f" \\\n    --hash=sha256:{digest}"
        lines.append(line)
    out = ROOT / "locks" / f"{args.flavour}.txt"
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"{out}: {len(versions)} packages, {len(versions) - len(unhashed)} with hashes")
    return 0


def check(args: argparse.Namespace) -> int:
    lock = parse_pins(Path(args.lock).read_text())
    installed = parse_pins("\n".join(ln for ln in sys.stdin.read().splitlines() if " @ " not in ln))
    problems = compare(lock, installed, set(args.ignore))
    for p in problems:
        print(f"lock check: {p}", file=sys.stderr)
    if problems:
        print(f"lock check: the venv differs from {args.lock} in {len(problems)} package(s)", file=sys.stderr)
        return 1
    print(f"lock check: the venv is exactly {args.lock} ({len(lock)} packages)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="resolve with pip and write locks/<flavour>.txt")
    gen.add_argument("--flavour", default="cu130")
    gen.add_argument("--index-url", default="", help="torch's wheel index for the flavour (empty: pip's own)")
    gen.add_argument("--torch", default="2.14.1")
    gen.add_argument("--torchvision", default="0.29.1")
    gen.add_argument("--python-version", action="append", help="another target Python besides this one (repeat)")
    chk = sub.add_parser("check", help="compare `pip freeze --all` on stdin with a lock file")
    chk.add_argument("lock")
    chk.add_argument("--ignore", nargs="*", default=["pip"], help="names not in the lock (pip, effbench)")
    ins = sub.add_parser("install", help="pip install one part of a lock (one image layer)")
    ins.add_argument("lock")
    ins.add_argument("part", choices=PARTS)
    ins.add_argument("--python", default=sys.executable, help="the venv's python, whose pip installs")
    ins.add_argument("--extra-index-url", default="", help="torch's wheel index for the flavour (empty: none)")
    args = parser.parse_args(argv)
    return {"generate": generate, "check": check, "install": install}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
