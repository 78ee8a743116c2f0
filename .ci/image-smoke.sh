#!/usr/bin/env bash
# Image smoke test: build the Dockerfile and run the image, with no Docker engine, no registry, no GPU.
#
#   sudo bash .ci/image-smoke.sh          # root: rootful podman; ~10 minutes on 2 cores
#   KEEP_IMAGE=1 bash .ci/image-smoke.sh  # keep localhost/effbench:ci-smoke afterwards
#   KEEP_IMAGE=1 REUSE_IMAGE=1 bash .ci/image-smoke.sh   # rerun the checks on the kept image
#   MEASURE_REBUILD=0 bash .ci/image-smoke.sh             # skip the timed rebuild after a one-line change
#   VENV_CACHE= bash .ci/image-smoke.sh                   # keep no venv layers for the next run
#
# 1. installs podman, buildah, runc and debootstrap from Debian when missing;
# 2. makes a Debian base image (debootstrap --variant=minbase + python3, `podman import`), reused
#    while it exists: CI cannot pull the CUDA base from a registry;
# 3. builds the Dockerfile with --isolation chroot --layers --build-arg BASE_IMAGE=<that image>, passing
#    this machine's pip settings as build args and mounting their local folders read-only; the build
#    itself checks `pip freeze` against locks/cu130.txt. Prints the image size and the effbench
#    layer's size (bounded by EFFBENCH_LAYER_MAX_KIB) and the venv's four layers (the largest bounded
#    by VENV_LAYER_MAX_MIB), checks that no pip setting reached the image's history, then rebuilds after a one-line change to
#    effbench and prints how long that took and what it shipped; a fixture whose failing RUN
#    command is not the last must fail to build (tests/fixtures/container/Dockerfile.failing-run);
# 4. runs the image with --runtime runc (explicit --ulimit values: podman's defaults exceed this
#    machine's hard limits) as a uid that is not the image's, with a host folder as /results:
#    `effbench run --smoke --device cpu` must succeed, leave its reports in the host folder, and its
#    process must not be root;
#    Then the entry forms: `effbench ...`, `--version`, bash, python, torchrun pass through; a run
#    with no -v for /results warns before and after that the results die with the container; a
#    read-only root runs with --tmpfs /tmp and fails with preflight's message (not the entry
#    script's) without it;
# 5. two negative runs that must fail fast with the preflight message instead of hanging:
#    a read-only /results, and a 64 MiB /dev/shm with DataLoader workers;
# 6. runs singularity.def's %environment with its %test, then a smoke run, in the image as Apptainer
#    would (read-only, no entrypoint, another uid, cwd bound): results must land under the cwd;
# 7. removes the image and the build's intermediate images, except the venv and pip stages' (VENV_CACHE): the
#    next run on this machine reuses them while the lock and the Dockerfile's venv steps are unchanged, and
#    builds only the layers above (the small base image is kept too). A fresh machine builds everything.
# Every podman run is under `timeout`, so a hang fails the step. Prints PASS/FAIL lines; exits 1 on
# any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-localhost/effbench:ci-smoke}
# The venv stage's layers (~6.3 GB: torch and its CUDA wheels), kept for the next run; empty: keep nothing.
VENV_CACHE=${VENV_CACHE-localhost/effbench-ci-venv:cache}
BASE=${BASE:-localhost/effbench-ci-base:bookworm}
SUITE=${SUITE:-bookworm}
RUN_UID=${RUN_UID:-23456}          # neither root nor the image's 10001; no passwd entry in the image
BUILD_TIMEOUT=${BUILD_TIMEOUT:-1500}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
FAIL_FAST_TIMEOUT=${FAIL_FAST_TIMEOUT:-120}
# The effbench layers (wheel copy + install) hold the package (~0.7 MiB of source): a bound far
# below the venv's gigabytes that still fails if the venv or torch slipped into them.
EFFBENCH_LAYER_MAX_KIB=${EFFBENCH_LAYER_MAX_KIB:-4096}
# Each venv layer (tools/lock.py PARTS) needs about three times its size free while it commits;
# the largest part is ~2.3 GB for cu130.
VENV_LAYER_MAX_MIB=${VENV_LAYER_MAX_MIB:-3072}
# Free disk the build needs under podman's graph root: the measured peak (15.6 GiB) and a margin.
DISK_NEED_GIB=${DISK_NEED_GIB:-16}
started=$SECONDS
failures=0
containers=()
new_images=()
unset images_before

log() { echo "[image-smoke $((SECONDS - started))s] $*"; }
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
die() { echo "FAIL: $*"; exit 1; }
# check "PASS TEXT" "FAIL TEXT" CMD...: one PASS or FAIL line from a command's exit status.
check() {
    local ok=$1 bad=$2
    shift 2
    if "$@"; then pass "$ok"; else fail "$bad"; fi
}

WORK=$(mktemp -d /tmp/effbench-image-smoke.XXXXXX)
chmod 755 "$WORK"

# The tag each kept stage gets: VENV_CACHE for the venv stage, VENV_CACHE-pip for the pip stage.
cache_tag() { if [ "$1" = venv ]; then echo "$VENV_CACHE"; else echo "$VENV_CACHE-$1"; fi; }
# The images the kept stages are made of, each step's (an ARG's too: the next step's cache is looked up under it),
# found by their parent links down to the base, sorted: what cleanup keeps. (`podman history` shows the steps
# that add no layer as <missing>: keeping only what it names broke the chain at the first ARG.)
venv_cache_chain() {
    local stage id
    for stage in venv pip; do
        id=$(podman image inspect --format '{{.Id}}' "$(cache_tag "$stage")" 2>/dev/null) || continue
        while [ -n "$id" ]; do
            echo "sha256:${id#sha256:}"
            id=$(podman image inspect --format '{{.Parent}}' "$id" 2>/dev/null || true)
        done
    done | sort -u
}

cleanup() {
    local c
    # -v: the image's VOLUME lines give every container anonymous volumes, removed only with it
    for c in "${containers[@]}"; do podman rm -f -v "$c" >/dev/null 2>&1 || true; done
    if [ "${KEEP_IMAGE:-0}" != 1 ]; then
        podman rmi -f "$IMAGE" >/dev/null 2>&1 || true
        # every image the builds made, intermediate ones (-a) included: they hold the venv layers
        # (~6 GB) but for the venv stage's, which VENV_CACHE keeps; a parent goes only after its children, hence the passes
        local keep=""
        [ -z "$VENV_CACHE" ] || keep=$(venv_cache_chain)
        for _ in 1 2 3; do
            [ -n "${images_before+set}" ] || break
            mapfile -t new_images < <(comm -13 <(echo "$images_before") <(podman images -a -q --no-trunc | sort -u) \
                | comm -23 - <(echo "$keep"))
            [ ${#new_images[@]} -gt 0 ] || break
            podman rmi -f "${new_images[@]}" >/dev/null 2>&1 || true
        done
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || die "needs root (rootful podman with --isolation chroot); run it with sudo"

# --- 1. tools ---------------------------------------------------------------------------------------
need=()
for tool in podman buildah runc debootstrap; do command -v "$tool" >/dev/null || need+=("$tool"); done
if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]} from Debian"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends podman buildah runc debootstrap ca-certificates >/dev/null
fi
podman --version
# podman's default rlimits (nofile and nproc around 1M) are above this machine's hard limits and runc
# fails to set them; explicit values below the hard limits work (4096 processes suffice: RLIMIT_NPROC
# counts the threads of the run's uid, which only this container uses).
nofile=$(ulimit -Hn)
{ [ "$nofile" = unlimited ] || [ "$nofile" -gt 8192 ]; } && nofile=8192
ULIMITS=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=4096:4096")

# --- 2. base image ----------------------------------------------------------------------------------
debian_mirror() {
    # The machine's own Debian mirror (deb822 sources first), not the security one.
    local uri
    uri=$(awk '/^URIs:/ {for (i = 2; i <= NF; i++) print $i}' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n1 || true)
    [ -n "$uri" ] || uri=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' /etc/apt/sources.list 2>/dev/null || true)
    echo "${uri:-http://deb.debian.org/debian}"
}
if podman image exists "$BASE"; then
    log "base image $BASE exists; reusing it"
else
    mirror=$(debian_mirror)
    log "debootstrap $SUITE from $mirror"
    timeout 600 debootstrap --variant=minbase --include=python3,python3-venv "$SUITE" "$WORK/rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1 \
        || { tail -20 "$WORK/debootstrap.log"; die "debootstrap failed"; }
    tar -C "$WORK/rootfs" -c . | podman import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' --change 'CMD ["/bin/sh"]' - "$BASE" >/dev/null
    rm -rf "$WORK/rootfs"
    pass "base image $BASE made with debootstrap + podman import"
fi

# --- 3. build ---------------------------------------------------------------------------------------
# Disk first: a build that runs out of it fails after minutes with a copier error. Measured peak 15.6
# GiB above the start (docs/containers.md "Layers"); images left by earlier runs that a timeout killed
# before their cleanup (untagged, unused) go first.
graph_root=$(podman info --format '{{.Store.GraphRoot}}')
free_gib() { df -Pk "$graph_root" | awk 'NR == 2 {print int($4 / 1048576)}'; }
if [ "$(free_gib)" -lt "$DISK_NEED_GIB" ]; then
    log "$(free_gib) GiB free under $graph_root: removing unused untagged images"
    for _ in 1 2 3; do podman image prune -f >/dev/null 2>&1 || true; done
fi
[ "$(free_gib)" -ge "$DISK_NEED_GIB" ] \
    || die "$(free_gib) GiB free under $graph_root, the build needs about $DISK_NEED_GIB GiB: free disk (podman system df; podman image prune -a) and rerun"
log "$(free_gib) GiB free under $graph_root (the build needs about $DISK_NEED_GIB GiB)"
# This machine's pip settings (environment first, then pip's config files) as build args; every
# local folder or file they name is mounted read-only at the same path.
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
mapfile -t pip_settings < <("$PY" - <<'EOF'
import ast, os, re, subprocess, sys
keys = {"index-url": "PIP_INDEX_URL", "extra-index-url": "PIP_EXTRA_INDEX_URL",
        "find-links": "PIP_FIND_LINKS", "cert": "PIP_CERT", "trusted-host": "PIP_TRUSTED_HOST"}
listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
config = {}
for line in listed.splitlines():
    m = re.match(r"^([^.]*)\.([a-z-]+)=(.*)$", line)
    if m and m.group(2) in keys and m.group(1) in ("global", "install", ":env:"):
        config.setdefault(m.group(2), ast.literal_eval(m.group(3)))
for key, var in keys.items():
    value = os.environ.get(var) or config.get(key)
    if value:
        print(f"{var}={' '.join(value.split())}")
EOF
)
build_args=(--build-arg "BASE_IMAGE=$BASE")
mounts=()
add_mount() {
    local path=$1
    [ -e "$path" ] || return 0
    case " ${mounts[*]-} " in *" $path:$path:ro "*) return 0 ;; esac
    mounts+=(--volume "$path:$path:ro")
}
for setting in "${pip_settings[@]}"; do
    build_args+=(--build-arg "$setting")
    name=${setting%%=*}
    for item in ${setting#*=}; do
        path=${item#file://}
        case "$path" in /*) ;; *) continue ;; esac
        case "$name" in
            PIP_INDEX_URL | PIP_EXTRA_INDEX_URL) [ "$(basename "$path")" = simple ] && path=$(dirname "$path") ;;
        esac
        add_mount "$path"
    done
done
log "pip settings passed to the build: ${pip_settings[*]:-none}"

images_before=$(podman images -a -q --no-trunc | sort -u)
build_start=$SECONDS
if [ "${REUSE_IMAGE:-0}" = 1 ] && podman image exists "$IMAGE"; then
    log "REUSE_IMAGE=1: testing the existing $IMAGE without rebuilding"
elif log "building $IMAGE (timeout ${BUILD_TIMEOUT}s)" && timeout "$BUILD_TIMEOUT" podman build --isolation chroot --layers \
    "${build_args[@]}" "${mounts[@]}" --build-arg BASE_DIGEST= \
    --build-arg "VCS_REF=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    --build-arg "BUILD_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    -t "$IMAGE" . >"$WORK/build.log" 2>&1; then
    build_s=$((SECONDS - build_start))
    size=$(podman image inspect "$IMAGE" --format '{{.Size}}')
    pass "image built in ${build_s}s, $((size / 1024 / 1024)) MiB"
    grep -E "^torch [0-9]" "$WORK/build.log" || true
    check "the build checked pip freeze against the lock: $(grep -m1 'lock check:' "$WORK/build.log" || echo 'step cached')" \
        "no lock check in the build log" grep -qE "lock check: the venv is exactly|Using cache" "$WORK/build.log"
else
    tail -40 "$WORK/build.log"
    die "podman build failed or ran past ${BUILD_TIMEOUT}s"
fi
cached_venv=$(grep -c "Using cache" "$WORK/build.log" || true)
log "build: $cached_venv step(s) from the layer cache"
# Tag the venv stage and the pip stage its installs mount (every step a cache hit: seconds) so that cleanup keeps
# their layers for the next run: a RUN that mounts a stage is cached under that stage's image, so without the pip
# stage kept the venv was built again. The layers an earlier lock (or pip settings) made are no longer needed then.
if [ -n "$VENV_CACHE" ] && [ "${REUSE_IMAGE:-0}" != 1 ]; then
    changed=0
    for stage in venv pip; do
        tag=$(cache_tag "$stage")
        old_cache=$(podman image inspect "$tag" --format '{{.Id}}' 2>/dev/null || true)
        if timeout "$BUILD_TIMEOUT" podman build --isolation chroot --layers "${build_args[@]}" "${mounts[@]}" \
            --build-arg BASE_DIGEST= --target "$stage" -t "$tag" . >"$WORK/cache-$stage.log" 2>&1; then
            new_cache=$(podman image inspect "$tag" --format '{{.Id}}')
            if [ -n "$old_cache" ] && [ "$old_cache" != "$new_cache" ]; then
                podman rmi -f "$old_cache" >/dev/null 2>&1 || true
                changed=1
            fi
        else
            tail -20 "$WORK/cache-$stage.log"
            fail "tagging the $stage stage as $tag failed"
        fi
    done
    if [ "$changed" = 1 ]; then
        for _ in 1 2 3 4 5 6; do podman image prune -f >/dev/null 2>&1 || true; done
        log "the venv or pip stage changed: their earlier layers removed"
    fi
    log "venv and pip stage layers kept for the next run on this machine as $(cache_tag venv), $(cache_tag pip)"
fi

# Bytes of the layers an effbench change produces: the wheel copy and its install. podman history's
# JSON gives each instruction's size in bytes (its text form is always human-readable in podman 4).
layer_sizes() {
    podman history --no-trunc --format json "$1" | "$PY" -c '
import json, sys
rows = json.load(sys.stdin)
venv = [r["size"] for r in rows if "lock.py install" in r["CreatedBy"]]
print(sum(r["size"] for r in rows if "effbench-wheel" in r["CreatedBy"]), sum(venv), len(venv), max(venv or [0]))'
}
effbench_layer_bytes() { layer_sizes "$1" | cut -d' ' -f1; }
layer=$(effbench_layer_bytes "$IMAGE")
read -r _ venv_bytes venv_layers venv_largest < <(layer_sizes "$IMAGE")
log "image $(($(podman image inspect "$IMAGE" --format '{{.Size}}') / 1024 / 1024)) MiB; venv $((venv_bytes / 1024 / 1024)) MiB in $venv_layers layers (largest $((venv_largest / 1024 / 1024)) MiB); effbench layers $((layer / 1024)) KiB"
check "effbench layers are $((layer / 1024)) KiB (bound ${EFFBENCH_LAYER_MAX_KIB} KiB)" \
    "effbench layers are $((layer / 1024)) KiB, over ${EFFBENCH_LAYER_MAX_KIB} KiB (did the venv move into them?)" \
    test "$layer" -gt 0 -a "$layer" -le $((EFFBENCH_LAYER_MAX_KIB * 1024))
check "the venv is $venv_layers layers, the largest $((venv_largest / 1024 / 1024)) MiB (bound ${VENV_LAYER_MAX_MIB} MiB)" \
    "the venv is $venv_layers layers, the largest $((venv_largest / 1024 / 1024)) MiB: over ${VENV_LAYER_MAX_MIB} MiB or not 4 (tools/lock.py PARTS)" \
    test "$venv_layers" -eq 4 -a "$venv_largest" -le $((VENV_LAYER_MAX_MIB * 1024 * 1024))

# The pip settings went in as build args: neither their names nor their values are in the image's history.
history=$(podman history --no-trunc --format '{{.CreatedBy}}' "$IMAGE")
leaked=()
for setting in "${pip_settings[@]}"; do
    for word in "${setting%%=*}=" ${setting#*=}; do
        if grep -qF -- "$word" <<<"$history"; then leaked+=("$word"); fi
    done
done
check "the image's history holds none of the ${#pip_settings[@]} pip settings given to the build" \
    "the image's history holds pip settings: ${leaked[*]-}" test ${#leaked[@]} -eq 0

if [ "${MEASURE_REBUILD:-1}" = 1 ] && [ "${REUSE_IMAGE:-0}" != 1 ]; then
    # The build context (.dockerignore's list) in a copy, with one line added to effbench.
    ctx="$WORK/context"
    mkdir -p "$ctx/tools"
    cp -r Dockerfile .dockerignore pyproject.toml README.md constraints.txt effbench entrypoint locks "$ctx/"
    cp tools/lock.py "$ctx/tools/"
    echo "# one-line change for the rebuild measurement" >>"$ctx/effbench/__init__.py"
    t0=$SECONDS
    if timeout "$BUILD_TIMEOUT" podman build --isolation chroot --layers "${build_args[@]}" "${mounts[@]}" \
        --build-arg BASE_DIGEST= --build-arg "VCS_REF=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)-changed" \
        -t "$IMAGE-rebuild" "$ctx" >"$WORK/rebuild.log" 2>&1; then
        rebuilt=$(effbench_layer_bytes "$IMAGE-rebuild")
        shared=$(comm -12 <(podman inspect --format '{{range .RootFS.Layers}}{{println .}}{{end}}' "$IMAGE" | sort) \
            <(podman inspect --format '{{range .RootFS.Layers}}{{println .}}{{end}}' "$IMAGE-rebuild" | sort) | grep -c . || true)
        total=$(podman inspect --format '{{len .RootFS.Layers}}' "$IMAGE-rebuild")
        pass "rebuild after a one-line effbench change: $((SECONDS - t0))s, $((total - shared)) new layer(s) of $total, effbench layers $((rebuilt / 1024)) KiB"
    else
        tail -20 "$WORK/rebuild.log"
        fail "rebuild after a one-line change failed"
    fi
    podman rmi -f "$IMAGE-rebuild" >/dev/null 2>&1 || true
fi

# A RUN whose failing command is not the last must fail the build (the Dockerfile's `set -eu;`).
if timeout 300 podman build --isolation chroot --layers=false --build-arg "BASE_IMAGE=$BASE" \
    -f tests/fixtures/container/Dockerfile.failing-run -t localhost/effbench-failing-run:ci tests/fixtures/container >"$WORK/failing.log" 2>&1; then
    podman rmi -f localhost/effbench-failing-run:ci >/dev/null 2>&1 || true
    fail "tests/fixtures/container/Dockerfile.failing-run built: a failing command inside a RUN went unnoticed"
elif grep -qx "effbench-fixture: a failing command went unnoticed" "$WORK/failing.log"; then
    fail "the failing RUN fixture went on after its failing command"
else
    pass "a RUN with a failing first command fails the build ($(grep -m1 -o 'exit status [0-9]*' "$WORK/failing.log" || echo failed))"
fi

# The same check in the finished image (also when the build step came from the cache).
# shellcheck disable=SC2016  # expanded in the container
if out=$(timeout "$RUN_TIMEOUT" podman run --rm --runtime runc "${ULIMITS[@]}" --entrypoint /bin/sh "$IMAGE" -c \
    'pip freeze --all | python /usr/local/lib/effbench/lock.py check "/usr/local/share/effbench/locks/$(python -c "import json; print(json.load(open(\"/etc/effbench/image.json\"))[\"flavour\"])").txt" --ignore pip effbench' 2>&1); then
    pass "in the image: $out"
else
    printf '%s\n' "$out" | tail -8 | sed 's/^/    /'
    fail "the image's venv differs from its lock"
fi

user=$(podman image inspect "$IMAGE" --format '{{.Config.User}}')
check "image USER is numeric non-root ($user)" "image USER is '$user'" grep -qE '^[1-9][0-9]*(:[0-9]+)?$' <<<"$user"

# --- 4. positive run: foreign uid, host folder as /results ------------------------------------------
results="$WORK/results"
mkdir -p "$results"
chown "$RUN_UID:$RUN_UID" "$results"
name="effbench-smoke-$$"
containers+=("$name")
log "effbench run --smoke --device cpu as uid $RUN_UID (timeout ${RUN_TIMEOUT}s)"
podman run -d --name "$name" --runtime runc "${ULIMITS[@]}" --user "$RUN_UID:$RUN_UID" \
    -v "$results:/results" "$IMAGE" run --smoke --device cpu >/dev/null
pid=$(podman inspect "$name" --format '{{.State.Pid}}')
proc_uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo "?")
code=$(timeout "$RUN_TIMEOUT" podman wait "$name" || echo timeout)
podman logs "$name" >"$WORK/smoke.log" 2>&1 || true
if [ "$proc_uid" = "$RUN_UID" ]; then
    pass "the container process runs as uid $proc_uid, not root"
else
    fail "the container process uid is $proc_uid (expected $RUN_UID)"
fi
if [ "$code" = 0 ]; then
    pass "effbench run --smoke exited 0"
else
    tail -30 "$WORK/smoke.log"
    fail "effbench run --smoke exited $code"
fi
run_dir=$(find "$results" -mindepth 1 -maxdepth 1 -type d | head -n1)
if [ -n "$run_dir" ]; then
    missing=""
    for f in config.json env.json results.json epochs.csv steps.csv report.txt report.md; do
        [ -s "$run_dir/$f" ] || missing="$missing $f"
    done
    check "host folder holds the run's reports: $(basename "$run_dir")" "missing in $run_dir:$missing" test -z "$missing"
    check "results.json says status ok" "results.json status is not ok" grep -q '"status": "ok"' "$run_dir/results.json"
    # podman named the container by its id; the run names the machine by this host's boot id (system/machine.py)
    boot=$(cut -c1-8 /proc/sys/kernel/random/boot_id)
    named=$(python3 -c 'import json, sys; e = json.load(open(sys.argv[1]))
print(e.get("container_runtime"), e.get("hostname"), e.get("machine"), e.get("machine_source"))' "$run_dir/env.json")
    check "env.json names the machine, not the container: $named" "env.json's machine is not boot-$boot: $named" \
        grep -qE "^podman [0-9a-f]{12} boot-$boot host boot id$" <<<"$named"
    extra=$(find "$results" -mindepth 1 -maxdepth 1 ! -path "$run_dir" -printf '%f ')
    check "the host folder holds nothing but the run folder" "the host folder also holds: $extra" test -z "$extra"
    owner=$(stat -c %u "$run_dir/results.json")
    check "reports are owned by uid $RUN_UID" "reports are owned by uid $owner" test "$owner" = "$RUN_UID"
else
    fail "no run folder in the host folder mounted as /results"
fi

# --- 4b. entry forms, the results that would die with the container, a read-only root -----------------
# in_image ARGS...: one short-lived container as the foreign uid; output and exit status kept.
in_image() {
    timeout "$RUN_TIMEOUT" podman run --rm --runtime runc "${ULIMITS[@]}" --user "$RUN_UID:$RUN_UID" "$@" 2>&1
}
vcs_ref=$(podman image inspect "$IMAGE" --format '{{index .Labels "org.opencontainers.image.revision"}}')
for form in "effbench --version" "--version"; do
    # shellcheck disable=SC2086  # the form is split into words on purpose
    if out=$(in_image "$IMAGE" $form) && grep -q "^effbench [0-9]" <<<"$out" && grep -q "image revision $vcs_ref" <<<"$out" \
        && grep -q "^torch .*, CUDA " <<<"$out"; then
        pass "\`$form\` in the image: $(tr '\n' ' ' <<<"$out" | cut -c1-160)"
    else
        printf '%s\n' "$out" | tail -5 | sed 's/^/    /'
        fail "\`$form\` in the image"
    fi
done
# shellcheck disable=SC2016  # expanded in the container, not here
check "\`bash -c ...\` passes through the entry script" "bash did not pass through" \
    grep -qx "uid=$RUN_UID" <<<"$(in_image "$IMAGE" bash -c 'echo "uid=$(id -u)"')"
check "\`python -c ...\` passes through" "python did not pass through" \
    grep -qx "3" <<<"$(in_image "$IMAGE" python -c 'import sys, effbench; print(sys.version_info[0])')"
check "\`torchrun --help\` passes through" "torchrun did not pass through" \
    grep -q "usage: torchrun" <<<"$(in_image "$IMAGE" torchrun --help)"
check "\`effbench run --smoke\` (the Apptainer habit) reaches effbench" "\`effbench effbench ...\` did not reach effbench" \
    grep -q "Usage: effbench run" <<<"$(in_image "$IMAGE" effbench run --help)"

# The README's first command on a new GPU machine, `docker run --gpus all effbench selftest`: the FLOPs
# checks (meta device, seconds) prove the command, its table and selftest.json work in the image.
st_results="$WORK/selftest-results"
mkdir -p "$st_results"
chown "$RUN_UID:$RUN_UID" "$st_results"
if out=$(in_image -v "$st_results:/results" "$IMAGE" selftest --device cpu --only flops) \
    && [ "$(grep -c 'FLOPs: .* PASS' <<<"$out")" = 2 ] && [ -s "$(find "$st_results" -name selftest.json | head -n1)" ]; then
    pass "\`selftest --device cpu --only flops\` in the image: 2 PASS, selftest.json in the host folder"
else
    printf '%s\n' "$out" | tail -8 | sed 's/^/    /'
    fail "\`selftest --only flops\` in the image (expected 2 FLOPs PASS rows and selftest.json under /results)"
fi

# (--no-profile in the extra runs below: they check the container set-up, the full run is checked above.)
# No -v for /results, as the image's own uid (the issue's `docker run --rm effbench run ...`): the run
# succeeds into an anonymous volume (removed by --rm), and says so before and after.
# shellcheck disable=SC2016  # the literal fix text
if out=$(timeout "$RUN_TIMEOUT" podman run --rm --runtime runc "${ULIMITS[@]}" "$IMAGE" run --smoke --device cpu --quiet --no-profile 2>&1) \
    && [ "$(grep -c '^warning: output-mount: /results is an anonymous volume' <<<"$out")" = 2 ] \
    && grep -q -- '-v "$PWD/results:/results"' <<<"$out"; then
    pass "no -v for /results: exit 0 with the output-mount warning before and after the run"
else
    printf '%s\n' "$out" | grep -v '^epoch' | tail -8 | sed 's/^/    /'
    fail "no -v for /results: expected the output-mount warning twice"
fi

# Read-only root (Docker --read-only; podman adds tmpfs on /tmp unless --read-only-tmpfs=false).
ro_results="$WORK/ro-root-results"
mkdir -p "$ro_results"
chown "$RUN_UID:$RUN_UID" "$ro_results"
if out=$(in_image --read-only --read-only-tmpfs=false --tmpfs /tmp -v "$ro_results:/results" "$IMAGE" run --smoke --device cpu --quiet --no-profile); then
    pass "read-only root with --tmpfs /tmp: the smoke run succeeds"
else
    printf '%s\n' "$out" | tail -8 | sed 's/^/    /'
    fail "read-only root with --tmpfs /tmp: the smoke run failed"
fi
set +e
out=$(in_image --read-only --read-only-tmpfs=false -v "$ro_results:/results" "$IMAGE" run --smoke --device cpu --quiet)
rc=$?
set -e
if [ $rc = 2 ] && grep -q "^error: " <<<"$out" && ! grep -q "cannot create directory" <<<"$out"; then
    pass "read-only root without a tmpfs: exit 2 with preflight's message: $(grep -m1 '^error:' <<<"$out" | cut -c1-150)"
else
    printf '%s\n' "$out" | tail -8 | sed 's/^/    /'
    fail "read-only root without a tmpfs: exit $rc (expected 2 with an error: line from effbench, not the entry script)"
fi

# --- 5. negative runs: fail fast with the preflight message -----------------------------------------
# expect_preflight NAME TEXT... -- PODMAN-RUN-ARGS...: exit 2 within FAIL_FAST_TIMEOUT, each TEXT on stderr.
expect_preflight() {
    local label=$1 out rc t0 texts=()
    shift
    while [ "$1" != -- ]; do texts+=("$1"); shift; done
    shift
    t0=$SECONDS
    set +e
    out=$(timeout "$FAIL_FAST_TIMEOUT" podman run --rm --runtime runc "${ULIMITS[@]}" --user "$RUN_UID:$RUN_UID" "$@" 2>&1)
    rc=$?
    set -e
    if [ $rc = 124 ] || [ $rc = 137 ]; then
        fail "$label: still running after ${FAIL_FAST_TIMEOUT}s (hang)"
        return
    fi
    local t
    for t in "${texts[@]}"; do
        if ! grep -qF -- "$t" <<<"$out"; then
            printf '%s\n' "$out" | tail -5 | sed 's/^/    /'
            fail "$label: exit $rc, output lacks '$t'"
            return
        fi
    done
    if [ $rc = 2 ]; then
        pass "$label: exit 2 after $((SECONDS - t0))s with: $(grep -m1 '^error:' <<<"$out" | cut -c1-150)"
    else
        fail "$label: exit $rc (expected 2)"
    fi
}

readonly_results="$WORK/readonly-results"
mkdir -p "$readonly_results"
expect_preflight "read-only /results" "error: --output: /results is not writable by uid $RUN_UID" "fix: Docker:" -- \
    -v "$readonly_results:/results:ro" "$IMAGE" run --smoke --device cpu
check "read-only run left nothing behind" "read-only run wrote into $readonly_results" test -z "$(ls -A "$readonly_results")"

# A small image-folder dataset, so /dev/shm is the only thing wrong with the second run.
data="$WORK/data"
for cls in cats dogs; do mkdir -p "$data/$cls"; done
"$PY" - "$data" <<'EOF'
import struct, sys, zlib
def png(path, rgb):  # an 8x8 solid-colour PNG, by hand: no imaging library needed
    raw = b"".join(b"\x00" + bytes(rgb) * 8 for _ in range(8))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0))
    open(path, "wb").write(data + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
for i in range(4):
    png(f"{sys.argv[1]}/cats/{i}.png", (200, 40 * i, 0))
    png(f"{sys.argv[1]}/dogs/{i}.png", (0, 40 * i, 200))
EOF
chmod -R a+rX "$data"
shm_results="$WORK/shm-results"
mkdir -p "$shm_results"
chown "$RUN_UID:$RUN_UID" "$shm_results"
expect_preflight "64 MiB /dev/shm with 2 workers" "error: --workers: /dev/shm has 64 MiB free" "--shm-size=" -- \
    --shm-size 64m -v "$shm_results:/results" -v "$data:/data:ro" "$IMAGE" \
    run --smoke --device cpu --dataset imagefolder --data-dir /data --workers 2 --batch-size 64 --image-size 224

# --- 6. as Apptainer would run it: read-only image, no entrypoint, no USER, cwd and HOME bound -------
# No Apptainer here, so singularity.def's %environment and %test/%runscript run in the image the
# way `apptainer test|run` does: this proves nothing essential lives only in the entry script.
environment=$("$PY" tools/check_singularity_def.py --section environment singularity.def)
sif_test=$("$PY" tools/check_singularity_def.py --section test singularity.def)
cwd="$WORK/apptainer-cwd"
mkdir -p "$cwd/home"
chown -R "$RUN_UID:$RUN_UID" "$cwd"
apptainer_like() {
    timeout "$RUN_TIMEOUT" podman run --rm --runtime runc "${ULIMITS[@]}" --user "$RUN_UID:$RUN_UID" \
        --read-only --image-volume ignore --entrypoint /bin/sh \
        -v "$cwd:$cwd" -w "$cwd" -e HOME="$cwd/home" "$IMAGE" -c "$environment
$1"
}
# a CI runner busier than its cores makes doctor's last line name the load instead of "all checks passed"
if out=$(apptainer_like "$sif_test" 2>&1) && grep -Eq "doctor: (all checks passed|no check failed, but)" <<<"$out"; then
    pass "%environment + %test (effbench doctor) pass in the read-only image"
else
    printf '%s\n' "$out" | tail -15 | sed 's/^/    /'
    fail "%environment + %test in the read-only image"
fi
if out=$(apptainer_like 'exec effbench run --smoke --device cpu --quiet' 2>&1) \
    && [ -s "$(find "$cwd/results" -name results.json 2>/dev/null | head -n1)" ]; then
    pass "%runscript-style run in the read-only image wrote its run folder under the working directory"
else
    printf '%s\n' "$out" | tail -15 | sed 's/^/    /'
    fail "run in the read-only image (results expected under $cwd/results)"
fi

# --- 7. summary (cleanup runs on exit) --------------------------------------------------------------
log "done in $((SECONDS - started))s"
if [ "$failures" -gt 0 ]; then
    echo "image-smoke: $failures check(s) FAILED"
    exit 1
fi
echo "image-smoke: all checks passed"
