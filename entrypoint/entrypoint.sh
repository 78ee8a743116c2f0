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

# The temp dir may be shared with other users (a bound host /tmp), who could make $scratch first or put a
# link in it: each folder below the temp dir is made 0700 and used only when it is no link, is ours and is
# writable by no one else, in a temp dir others cannot rename it in (effbench/system/private_dirs.py checks
# the same; a folder refused here is left to it, which says so in one line).
private() {
    mkdir -m 700 "$1" 2>/dev/null
    { [ -d "$1" ] && [ ! -L "$1" ]; } || return 1
    set -f
    # shellcheck disable=SC2046  # split on purpose: ls -ldn's fields are mode, links, uid
    set -- $(ls -ldn "$1")
    set +f
    [ "${3:-}" = "$uid" ] || return 1
    case "$1" in ?????w* | ????????w*) return 1 ;; esac
}
shared_ok() {
    set -f
    # shellcheck disable=SC2046
    set -- $(ls -ldn "${TMPDIR:-/tmp}/" 2>/dev/null)
    set +f
    case "${1:-}" in ?????????[tT]*) return 0 ;; ?????w* | ????????w*) return 1 ;; esac
}

if [ -z "${HOME:-}" ] || [ "$HOME" = / ] || ! writable "$HOME"; then
    if shared_ok && private "$scratch" && private "$scratch/home"; then
        HOME="$scratch/home"
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
    { shared_ok && private "$scratch" && private "$scratch/cache" && private "$new"; } || continue
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
