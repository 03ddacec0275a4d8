#!/usr/bin/env bash
# Make sure a Docker engine answers `docker info`; start one when none runs.
#
#   bash deploy/image/ensure-docker.sh      # exit 0 once `docker info` works, non-zero with one line if not
#
# Where an engine already runs (a developer's machine, a CI runner with Docker) this does nothing. Otherwise,
# as root on Debian, it installs Debian's `docker.io` when `dockerd` is missing and starts `dockerd` in the
# background (its output in /var/log/kanal-dockerd.log), then waits for `docker info` with a deadline.
# The engine keeps running after this script ends: later builds and test runs reuse it and its image cache.
set -uo pipefail
DEADLINE_S=${KANAL_DOCKER_START_S_MAX:-90}

if docker info >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "ensure-docker: no Docker engine answers and only root may start one here" >&2
  exit 1
fi
if ! command -v dockerd >/dev/null; then
  if ! command -v apt-get >/dev/null; then
    echo "ensure-docker: no dockerd and no apt-get to install docker.io" >&2
    exit 1
  fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null \
    || { echo "ensure-docker: apt-get install docker.io failed" >&2; exit 1; }
fi
if ! command -v docker >/dev/null; then
  echo "ensure-docker: the docker client is missing after installing docker.io" >&2
  exit 1
fi
# setsid: the engine outlives this script's process group (a test runner's Ctrl-C must not stop it).
setsid dockerd >>/var/log/kanal-dockerd.log 2>&1 < /dev/null &
end=$((SECONDS + DEADLINE_S))
until docker info >/dev/null 2>&1; do
  if [ "$SECONDS" -ge "$end" ]; then
    echo "ensure-docker: dockerd did not answer docker info within ${DEADLINE_S}s; see /var/log/kanal-dockerd.log" >&2
    exit 1
  fi
  sleep 0.5
done
