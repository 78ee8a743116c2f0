# effbench: a PyTorch CNN training benchmark, as an image.
#
#   docker build -t effbench .
#   docker run --rm --gpus all --shm-size=8g --user "$(id -u):$(id -g)" \
#       -v "$PWD/results:/results" -v /path/to/datasets:/data:ro effbench run --arch b0 --dataset cifar100
#   docker run --rm effbench doctor                   # what would stop a run here, and the fix
#
# Base: nvidia/cuda's `base` flavour (CUDA 13.0, Ubuntu 24.04, Python 3.12 from apt), pinned by digest.
# `base` is enough: torch's wheels bring their CUDA libraries, so `runtime`/`cudnn` would only add
# gigabytes of duplicates. What it adds over a plain distribution: the forward-compatibility libraries
# (cuda-compat, /usr/local/cuda/compat), with which a data-center GPU on an older driver branch (R535,
# R550, R570) runs CUDA 13 code; NVIDIA_REQUIRE_CUDA, with which the NVIDIA Container Toolkit refuses a
# driver that cannot run it before the container starts; CUDA_VERSION, which `effbench doctor` reports
# beside the driver's own CUDA version (docs/containers.md). Debian stays a build argument, and CI's
# offline stand-in (.ci/image-smoke.sh builds on a debootstrapped Debian 12, Python 3.11):
#   docker build --build-arg BASE_IMAGE=debian:bookworm-slim \
#       --build-arg BASE_DIGEST=@sha256:4b50eb66f977b4062683ff434ef18ac191da862dbe966961bc11990cf5791a8d .
# Flavours: the default is torch's CUDA 13.0 build (R580+ driver, or forward compatibility on a
# data-center GPU). For a GeForce/RTX card on an older driver build the CUDA 12.6 wheels instead
# (any R525+ driver runs them), after generating their lock once (tools/lock.py; docs/containers.md):
#   docker build -t effbench:cu126 --build-arg FLAVOUR=cu126 --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 \
#       --build-arg TORCH_VERSION=<version> --build-arg TORCHVISION_VERSION=<matching version> \
#       --build-arg BASE_IMAGE=nvidia/cuda:12.6.3-base-ubuntu24.04 --build-arg BASE_DIGEST= .
#
# Reproducible: every package comes from locks/<FLAVOUR>.txt (exact versions, sha256 hashes) and the
# build fails unless `pip freeze` equals the lock; the base is pinned by digest (BASE_DIGEST).
# Layers: the locked packages are four layers (CUDA libraries, torch, the rest) that change only with
# the lock; effbench is a small layer above them, so a code change rebuilds and ships kilobytes
# (docs/containers.md). The runtime stage builds on the venv stage: no copy of the venv.
# Every RUN starts with `set -eu`: podman and buildah ignore SHELL in their default OCI format, and
# /bin/sh -c alone would hide a failing command that is not the last one.
# Behind a mirror, pass the pip settings through (nothing here names a host):
#   --build-arg PIP_INDEX_URL=... --build-arg PIP_EXTRA_INDEX_URL=... --build-arg PIP_FIND_LINKS=...
#   --build-arg PIP_CERT=/path/inside/build   (with the file mounted: podman build --volume ...)
# They reach pip as a pip.conf mounted from the `pip` stage, never the image or its history. The mount
# (RUN --mount) needs BuildKit, Docker 23+'s default builder (older: DOCKER_BUILDKIT=1), or podman/buildah.
#
# The torch wheels bundle their CUDA libraries (nvidia-* wheels in the lock) and the NVIDIA Container
# Toolkit / `singularity --nv` bring the driver, so the base only has to provide glibc and a Python the
# lock was made for: locks/cu130.txt holds wheel hashes for 3.12 (Ubuntu 24.04's python3, the default
# base) and 3.11 (Debian 12's, the base CI builds on). NVIDIA_* below ask the toolkit for the compute
# and utility (nvidia-smi, NVML) driver parts, as the nvidia/cuda images do.

# The digest of nvidia/cuda:13.0.1-base-ubuntu24.04 (linux/amd64 and arm64 index) as public Dockerfiles
# pin it (GitHub code search for the digest: e.g. a vLLM serving image and a ComfyUI image, both
# `FROM nvidia/cuda:13.0.1-base-ubuntu24.04@sha256:f8ef28f5...`); it was not re-read from the registry
# here (no registry access). Refresh it when moving the tag:
# `skopeo inspect --format '{{.Digest}}' docker://docker.io/nvidia/cuda:13.0.1-base-ubuntu24.04`
# or `docker buildx imagetools inspect nvidia/cuda:13.0.1-base-ubuntu24.04`. Pass BASE_DIGEST= (empty)
# with another BASE_IMAGE (its python3 must be one of the lock's: tools/lock.py generate --python-version X.Y).
ARG BASE_IMAGE=nvidia/cuda:13.0.1-base-ubuntu24.04
ARG BASE_DIGEST=@sha256:f8ef28f579ea42a44b415d2c5d46f788e6a9b395c6c83f2929416e1fc192c143

# --- base: Python 3 and venv on the chosen base (skips apt when the base already has them) -------
FROM ${BASE_IMAGE}${BASE_DIGEST} AS base
ARG DEBIAN_FRONTEND=noninteractive
RUN set -eu; \
    if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then \
        apt-get update; \
        apt-get install -y --no-install-recommends python3 python3-venv ca-certificates; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    python3 --version

# --- pip: the pip settings given as build args, written to a pip.conf in a stage of its own. The venv
# steps mount it, so the values (an index URL may carry a token) never enter the image or its history.
FROM base AS pip
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_CERT
ARG PIP_TRUSTED_HOST
# pip reads several values of one key separated by whitespace, as it does from PIP_* variables.
RUN set -eu; \
    { echo '[global]'; \
      echo 'no-cache-dir = true'; \
      echo 'disable-pip-version-check = true'; \
      echo 'timeout = 180'; \
      if [ -n "${PIP_INDEX_URL:-}" ]; then echo "index-url = ${PIP_INDEX_URL}"; fi; \
      if [ -n "${PIP_EXTRA_INDEX_URL:-}" ]; then echo "extra-index-url = ${PIP_EXTRA_INDEX_URL}"; fi; \
      if [ -n "${PIP_FIND_LINKS:-}" ]; then echo "find-links = ${PIP_FIND_LINKS}"; fi; \
      if [ -n "${PIP_CERT:-}" ]; then echo "cert = ${PIP_CERT}"; fi; \
      if [ -n "${PIP_TRUSTED_HOST:-}" ]; then echo "trusted-host = ${PIP_TRUSTED_HOST}"; fi; \
    } > /pip.conf

# --- venv: exactly the lock (torch, torchvision, their CUDA wheels, effbench's deps) ----------------
FROM base AS venv
ARG FLAVOUR=cu130
ARG TORCH_VERSION=2.14.1
ARG TORCHVISION_VERSION=0.29.1
# Empty: the index pip is configured with (PyPI's torch is the CUDA 13.0 build on Linux x86_64).
ARG TORCH_INDEX_URL=
COPY locks/ /usr/local/share/effbench/locks/
COPY tools/lock.py /usr/local/lib/effbench/lock.py
RUN set -eu; \
    lock="/usr/local/share/effbench/locks/${FLAVOUR}.txt"; \
    [ -f "$lock" ] || { echo "no lock for flavour ${FLAVOUR}: run tools/lock.py generate --flavour ${FLAVOUR} (docs/containers.md)" >&2; exit 1; }; \
    grep -qix "torch==${TORCH_VERSION}.*" "$lock" || { echo "$lock does not pin torch==${TORCH_VERSION}" >&2; exit 1; }; \
    python3 -m venv /opt/venv
# The venv in four layers of at most ~2 GB (tools/lock.py PARTS): a layer's commit needs about three
# times its size on disk, and one 6 GB layer ran a CI machine out of it. Each part is installed with
# `pip install --require-hashes --no-deps`: a file whose sha256 is not the lock's stops the build.
RUN --mount=type=bind,from=pip,source=/pip.conf,target=/run/effbench-pip.conf \
    set -eu; PIP_CONFIG_FILE=/run/effbench-pip.conf python3 /usr/local/lib/effbench/lock.py install \
        "/usr/local/share/effbench/locks/${FLAVOUR}.txt" cudnn-cublas --python /opt/venv/bin/python --extra-index-url "${TORCH_INDEX_URL}"
RUN --mount=type=bind,from=pip,source=/pip.conf,target=/run/effbench-pip.conf \
    set -eu; PIP_CONFIG_FILE=/run/effbench-pip.conf python3 /usr/local/lib/effbench/lock.py install \
        "/usr/local/share/effbench/locks/${FLAVOUR}.txt" cuda --python /opt/venv/bin/python --extra-index-url "${TORCH_INDEX_URL}"
RUN --mount=type=bind,from=pip,source=/pip.conf,target=/run/effbench-pip.conf \
    set -eu; PIP_CONFIG_FILE=/run/effbench-pip.conf python3 /usr/local/lib/effbench/lock.py install \
        "/usr/local/share/effbench/locks/${FLAVOUR}.txt" torch --python /opt/venv/bin/python --extra-index-url "${TORCH_INDEX_URL}"
RUN --mount=type=bind,from=pip,source=/pip.conf,target=/run/effbench-pip.conf \
    set -eu; PIP_CONFIG_FILE=/run/effbench-pip.conf python3 /usr/local/lib/effbench/lock.py install \
        "/usr/local/share/effbench/locks/${FLAVOUR}.txt" rest --python /opt/venv/bin/python --extra-index-url "${TORCH_INDEX_URL}"; \
    /opt/venv/bin/python -m pip check --disable-pip-version-check
# The build fails here unless the venv holds exactly the pinned torch and torchvision (a resolver
# that upgraded or replaced them would otherwise go unnoticed until a benchmark reports them).
RUN /opt/venv/bin/python -c "import sys, torch, torchvision; \
want = ('${TORCH_VERSION}', '${TORCHVISION_VERSION}'); \
got = (torch.__version__.split('+')[0], torchvision.__version__.split('+')[0]); \
print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'torchvision', torchvision.__version__); \
sys.exit(0 if got == want else f'pinned torch/torchvision {want}, installed {got}')"

# --- wheel: effbench alone, built with the venv's setuptools (no network, no build isolation) ------
FROM venv AS wheel
COPY pyproject.toml README.md /src/
COPY effbench /src/effbench
RUN set -eu; /opt/venv/bin/python -m pip wheel --no-deps --no-build-isolation --no-index -w /wheel /src

# --- runtime: the venv's layers as they are (a COPY would write 6 GB again), the entry script, a
# non-root uid that any other uid can replace ---------------------------------------------------------
FROM venv AS runtime
ARG BASE_IMAGE
ARG BASE_DIGEST
ARG FLAVOUR=cu130
ARG TORCH_VERSION=2.14.1
ARG TORCHVISION_VERSION=0.29.1
ARG TORCH_INDEX_URL=
ARG EFFBENCH_VERSION=0.1.0
LABEL org.opencontainers.image.title="effbench" \
      org.opencontainers.image.description="Reproducible PyTorch CNN training benchmark: throughput, data vs compute time, accuracy" \
      org.opencontainers.image.version="${EFFBENCH_VERSION}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      org.opencontainers.image.base.digest="${BASE_DIGEST}" \
      io.effbench.flavour="${FLAVOUR}" \
      io.effbench.torch.version="${TORCH_VERSION}" \
      io.effbench.torchvision.version="${TORCHVISION_VERSION}" \
      io.effbench.torch.index="${TORCH_INDEX_URL}"

# uid/gid 10001: outside the ranges distributions hand out, so it never maps to a real host user.
# /cache is world-writable with the sticky bit (any uid can cache; the entry script makes its
# subfolders the same way); /results belongs to 10001 and other uids mount a host folder there;
# /data is meant to be mounted read-only.
RUN set -eu; \
    groupadd --gid 10001 effbench; \
    useradd --uid 10001 --gid 10001 --home-dir /home/effbench --create-home --shell /bin/sh effbench; \
    mkdir -p /results /data /cache; \
    chown 10001:10001 /results; \
    chmod 0775 /results; \
    chmod 1777 /cache

COPY --chmod=0755 entrypoint/entrypoint.sh /usr/local/bin/effbench-entrypoint

ENV PATH=/opt/venv/bin:${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONNOUSERSITE=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    EFFBENCH_OUTPUT=/results \
    EFFBENCH_DATA=/data \
    XDG_CACHE_HOME=/cache \
    TORCH_HOME=/cache/torch \
    TRITON_CACHE_DIR=/cache/triton \
    TORCHINDUCTOR_CACHE_DIR=/cache/inductor \
    MPLCONFIGDIR=/cache/matplotlib \
    CUDA_CACHE_PATH=/cache/nv

# The effbench layer (kilobytes): the only one an effbench change rebuilds. The venv must then be
# exactly the lock plus effbench (`pip freeze` against locks/<FLAVOUR>.txt), or the build stops.
COPY --from=wheel /wheel/ /tmp/effbench-wheel/
RUN set -eu; \
    PIP_NO_CACHE_DIR=1 /opt/venv/bin/python -m pip install --no-deps --no-index --no-compile /tmp/effbench-wheel/*.whl; \
    rm -rf /tmp/effbench-wheel; \
    /opt/venv/bin/python -m pip check; \
    /opt/venv/bin/python -m pip freeze --all > /tmp/freeze.txt; \
    /opt/venv/bin/python /usr/local/lib/effbench/lock.py check "/usr/local/share/effbench/locks/${FLAVOUR}.txt" \
        --ignore pip effbench < /tmp/freeze.txt; \
    rm -f /tmp/freeze.txt

VOLUME ["/results", "/data", "/cache"]
# Not /results: podman gives a uid without a passwd entry HOME=$WORKDIR, and ~/.nv or ~/.config
# must not land among the results.
WORKDIR /home/effbench
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/effbench-entrypoint"]
CMD ["--help"]

# Last, so a new revision or date rebuilds only these: the image's identity, read by
# `effbench --version` and recorded in env.json (effbench/system/identity.py).
ARG VCS_REF=unknown
ARG BUILD_DATE=unknown
USER 0:0
RUN set -eu; \
    mkdir -p /etc/effbench; \
    lock_sha=$(sha256sum "/usr/local/share/effbench/locks/${FLAVOUR}.txt"); \
    lock_sha=${lock_sha%% *}; \
    printf '{"revision": "%s", "created": "%s", "flavour": "%s", "lock_sha256": "%s", "base": "%s%s"}\n' \
        "${VCS_REF}" "${BUILD_DATE}" "${FLAVOUR}" "$lock_sha" "${BASE_IMAGE}" "${BASE_DIGEST}" > /etc/effbench/image.json
USER 10001:10001
LABEL org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.created="${BUILD_DATE}"
