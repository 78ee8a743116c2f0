#!/bin/sh
# Container entry point of the effbench image: make HOME and the caches writable, then run effbench.
#
#   docker run --rm --user "$(id -u):$(id -g)" -v "$PWD/results:/results" effbench run --smoke
#
# The image runs as uid 10001, but Docker's --user, compose's user: and OpenShift pick any uid,
# which then has no passwd entry, HOME=/ and no name. This script only moves HOME and unwritable
# cache folders under /tmp and names the user; `effbench run` makes the same checks itself
# (effbench/system/preflight.py), because `apptainer exec` and `docker run --entrypoint` skip this file.
set -eu

uid=$(id -u)
scratch="${TMPDIR:-/tmp}/effbench-$uid"

# A writable folder, made if missing; quiet on failure.
writable() {
    mkdir -p "$1" 2>/dev/null && [ -w "$1" ]
}

if [ -z "${HOME:-}" ] || [ "$HOME" = / ] || ! writable "$HOME"; then
    HOME="$scratch/home"
    mkdir -p "$HOME"
    chmod 700 "$HOME" "$scratch" 2>/dev/null || true
    export HOME
fi

# getpass.getuser(), used by torch's compile caches, fails for a uid with no name.
if [ -z "${USER:-}" ]; then
    USER=$(id -un 2>/dev/null || echo "uid$uid")
    export USER
fi
: "${LOGNAME:=$USER}"
export LOGNAME

for var in XDG_CACHE_HOME TORCH_HOME TRITON_CACHE_DIR TORCHINDUCTOR_CACHE_DIR MPLCONFIGDIR CUDA_CACHE_PATH; do
    eval "dir=\${$var:-}"
    [ -n "$dir" ] || continue
    if ! writable "$dir"; then
        new="$scratch/cache/$(echo "$var" | tr '[:upper:]' '[:lower:]')"
        # A read-only TORCH_HOME that already holds weights is kept: they are read from it.
        if [ "$var" = TORCH_HOME ] && [ -n "$(ls -A "$dir/hub/checkpoints" 2>/dev/null)" ]; then
            continue
        fi
        mkdir -p "$new"
        echo "effbench-entrypoint: $var=$dir is not writable by uid $uid; using $new" >&2
        export "$var=$new"
    fi
done

exec effbench "$@"
