#!/bin/sh
# Container entry point of the effbench image: make HOME and the caches writable, then run effbench.
#
#   docker run --rm --user "$(id -u):$(id -g)" -v "$PWD/results:/results" effbench run --smoke
#   docker run --rm effbench effbench run --smoke     # the form Apptainer users type: same thing
#   docker run --rm -it effbench bash                 # any program on PATH runs as is (python, torchrun, nvidia-smi)
#   docker run --rm effbench --version
#
# The image runs as uid 10001, but Docker's --user, compose's user: and OpenShift pick any uid,
# which then has no passwd entry, HOME=/ and no name. This script only moves HOME and unwritable
# cache folders under /tmp and names the user; `effbench run` makes the same checks itself
# (effbench/system/preflight.py), because `apptainer exec` and `docker run --entrypoint` skip this file.
# It never fails on its own: on a read-only root (`--read-only` without `--tmpfs /tmp`) a folder it
# cannot make is left as it was, and effbench's preflight says what to change.
set -u

uid=$(id -u)
scratch="${TMPDIR:-/tmp}/effbench-$uid"

# A writable folder, made if missing; quiet on failure.
writable() {
    mkdir -p "$1" 2>/dev/null && [ -w "$1" ]
}

if [ -z "${HOME:-}" ] || [ "$HOME" = / ] || ! writable "$HOME"; then
    if writable "$scratch/home"; then
        HOME="$scratch/home"
        chmod 700 "$HOME" "$scratch" 2>/dev/null || true
        export HOME
    fi
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
    if writable "$dir"; then
        # A cache volume is shared by every uid that mounts it: folders made here are 1777 (like
        # /tmp), or the next uid could not add to what the first one created with umask 022.
        case "$dir" in /cache/*) chmod 1777 "$dir" 2>/dev/null || true ;; esac
        continue
    fi
    new="$scratch/cache/$(echo "$var" | tr '[:upper:]' '[:lower:]')"
    # A read-only TORCH_HOME that already holds weights is kept: they are read from it.
    if [ "$var" = TORCH_HOME ] && [ -n "$(ls -A "$dir/hub/checkpoints" 2>/dev/null)" ]; then
        continue
    fi
    writable "$new" || continue
    echo "effbench-entrypoint: $var=$dir is not writable by uid $uid; using $new" >&2
    export "$var=$new"
done
# torch.hub makes hub/checkpoints itself with the caller's umask; made here first, any uid can add weights.
case "${TORCH_HOME:-}" in
    /cache/*) for sub in hub hub/checkpoints; do mkdir -m 1777 "$TORCH_HOME/$sub" 2>/dev/null || true; done ;;
esac

# Pass-through: `effbench ...` (the Apptainer habit) and any program on PATH run as given; an
# effbench command or option goes to effbench, which also answers a typo with its own error.
case "${1:-}" in
    effbench) shift ;;
    run | sweep | report | compare | doctor | selftest | models | datasets | export | worker | -* | "") ;;
    */*) exec "$@" ;;
    *) if command -v "$1" >/dev/null 2>&1; then exec "$@"; fi ;;
esac
exec effbench "$@"
