#!/usr/bin/env bash
# Build kanal's container image, here and anywhere:
#
#   bash deploy/image/build.sh                    # image kanal:dev (target `kanal`: servers + CLI, no Spark)
#   bash deploy/image/build.sh --target spark     # image kanal-spark:dev (plus Java 17, pyspark, pyarrow, pandas)
#   bash deploy/image/build.sh --tag registry.example/kanal:0.1.0
#   bash deploy/image/build.sh --prune-build-stage  # then remove the build stage's untagged image
#
# The build stage (compilers and headers, ~600 MB) stays behind as an untagged image (`<none>` in `docker
# image ls`, label dev.kanal.stage=build): it is Docker's cache, so a rebuild takes seconds. The script
# says so at the end; --prune-build-stage removes the untagged images with that label after the build
# (the next build compiles again).
#
# Steps: a Docker engine must answer (ensure-docker.sh starts one when none runs and this is root on
# Debian); the base image python:3.11-slim must exist (base-image.sh pulls it, or builds it locally with
# debootstrap when no registry answers); the build context is assembled in a temporary directory (only
# pyproject.toml, setup.py, README.md and the code folders: no .venv, .git or tests); then `docker build`
# with the legacy builder's features only, never --pull, on the host network.
#
# Dependencies: on a Linux x86_64/aarch64 host with CPython 3.11 (the image's platform and Python) the
# dependency wheels are built on the host with its own pip settings (so a machine whose builds cannot reach
# PyPI, but whose pip can, still builds) into a cached wheelhouse, and the build installs from it alone
# (PIP_NO_INDEX). Elsewhere (macOS, another Python) the wheelhouse stays empty and the build's first stage
# downloads them from PyPI. Layers are cached by Docker: a rebuild with unchanged sources takes seconds.
set -euo pipefail
cd "$(dirname "$0")/../.."
TARGET=kanal
TAG=""
PRUNE_BUILD_STAGE=false
while [ $# -gt 0 ]; do
  case "$1" in
    --target) TARGET=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    --prune-build-stage) PRUNE_BUILD_STAGE=true; shift ;;
    *) echo "build.sh: unknown option $1 (use --target kanal|spark, --tag IMAGE, --prune-build-stage)" >&2; exit 2 ;;
  esac
done
case "$TARGET" in
  kanal) TAG=${TAG:-kanal:dev} ;;
  spark) TAG=${TAG:-kanal-spark:dev} ;;
  *) echo "build.sh: --target must be kanal or spark" >&2; exit 2 ;;
esac
PYTHON=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}

bash deploy/image/ensure-docker.sh
bash deploy/image/base-image.sh

CONTEXT=$(mktemp -d /tmp/kanal-image-context.XXXXXX)
trap 'rm -rf "$CONTEXT"' EXIT
mkdir -p "$CONTEXT/src" "$CONTEXT/wheelhouse"
cp pyproject.toml setup.py README.md "$CONTEXT/src/"
for folder in proto metadata raft broker clients spark deploy; do
  # Sources only: no caches, no compiled extensions or kanal-spark jar of the host, no node_modules.
  tar -C . --exclude='__pycache__' --exclude='*.so' --exclude='*.pyc' --exclude='node_modules' --exclude='spark/jvm/build' -cf - "$folder" \
    | tar -C "$CONTEXT/src" -xf -
done

NO_INDEX=false
if [ "$(uname -s)" = Linux ] && "$PYTHON" -c 'import sys, platform; sys.exit(not (sys.version_info[:2] == (3, 11) and platform.machine() in ("x86_64", "aarch64")))'; then
  REQUIREMENTS=$("$PYTHON" - "$TARGET" <<'PY'
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))
reqs = list(project["build-system"]["requires"]) + list(project["project"]["dependencies"])
reqs += project["project"]["optional-dependencies"]["s3"]  # both targets install the s3 extra
if sys.argv[1] == "spark":
    reqs += project["project"]["optional-dependencies"]["spark"]
print("\n".join(r.split("#")[0].strip() for r in reqs))
PY
)
  # pip's own cache makes this quick after the first time; identical wheels keep Docker's layer cache.
  "$PYTHON" -m pip wheel -q -w "$CONTEXT/wheelhouse" -r <(echo "$REQUIREMENTS") >"$CONTEXT/pip.log" 2>&1 \
    || { cat "$CONTEXT/pip.log" >&2; echo "build.sh: pip wheel failed" >&2; exit 1; }
  rm "$CONTEXT/pip.log"
  NO_INDEX=true
fi

started=$SECONDS
DOCKER_BUILDKIT=0 docker build --force-rm --network host --target "$TARGET" --build-arg PIP_NO_INDEX=$NO_INDEX \
  -f deploy/image/Dockerfile -t "$TAG" "$CONTEXT" >"$CONTEXT.log" 2>&1 \
  || { cat "$CONTEXT.log" >&2; rm -f "$CONTEXT.log"; echo "build.sh: docker build failed" >&2; exit 1; }
rm -f "$CONTEXT.log"
size=$(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}')
echo "build.sh: built $TAG ($size) in $((SECONDS - started))s"
STAGE_FILTER=(--filter dangling=true --filter label=dev.kanal.stage=build)
if $PRUNE_BUILD_STAGE; then
  docker image prune -f "${STAGE_FILTER[@]}" >/dev/null
  echo "build.sh: removed the build stage's untagged images (the next build compiles again)"
else
  stage=$(docker image ls -q "${STAGE_FILTER[@]}" | head -n 1)
  if [ -n "$stage" ]; then
    stage_size=$(docker image inspect -f '{{.Size}}' "$stage" | awk '{printf "%.0f MB", $1/1e6}')
    echo "build.sh: the build stage stays as untagged image $stage ($stage_size), Docker's cache for the" \
      "next build; --prune-build-stage (or docker image prune --filter label=dev.kanal.stage=build) removes it"
  fi
fi
