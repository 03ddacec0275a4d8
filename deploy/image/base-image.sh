#!/usr/bin/env bash
# Make sure the base image `python:3.11-slim` exists in the local Docker engine.
#
#   bash deploy/image/base-image.sh         # exit 0 once `docker image inspect python:3.11-slim` works
#
# Already there: nothing to do. Pullable (an ordinary machine): `docker pull`. Neither (a machine with no
# registry, see ../../README.md's test section): build an equivalent locally from Debian bookworm with
# debootstrap, as root — Debian's python3 (3.11), pip and venv, CA certificates — and `docker import` it
# under the same tag, so `FROM python:3.11-slim` builds against it unchanged (never build with --pull).
#
# Traps of such a root filesystem, each handled below: pip refuses to install into Debian's Python while
# /usr/lib/python3.11/EXTERNALLY-MANAGED exists; `python` must exist beside `python3`; openjdk's package
# (the Spark target) fails to install without /usr/share/man/man1; HTTPS through a TLS-inspecting proxy
# needs the CA certificates this host trusts, copied from /usr/local/share/ca-certificates/.
set -euo pipefail
TAG=${KANAL_BASE_IMAGE:-python:3.11-slim}
PULL_S_MAX=${KANAL_PULL_S_MAX:-60}

if docker image inspect "$TAG" >/dev/null 2>&1; then
  exit 0
fi
if timeout "$PULL_S_MAX" docker pull -q "$TAG" >/dev/null 2>&1; then
  exit 0
fi
echo "base-image: $TAG cannot be pulled; building it locally with debootstrap" >&2
if [ "$(id -u)" != 0 ]; then
  echo "base-image: building $TAG needs root (debootstrap)" >&2
  exit 1
fi
if ! command -v debootstrap >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
MIRROR=http://deb.debian.org/debian
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  found=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  [ -n "$found" ] && MIRROR=$found
fi
ROOTFS=$(mktemp -d /tmp/kanal-base-rootfs.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
  bookworm "$ROOTFS" "$MIRROR" >/dev/null
rm -f "$ROOTFS"/usr/lib/python3.11/EXTERNALLY-MANAGED
ln -sf python3 "$ROOTFS"/usr/bin/python
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$ROOTFS"/usr/local/share/ca-certificates/
  chroot "$ROOTFS" update-ca-certificates >/dev/null 2>&1 || true
fi
# Slim it: documentation, locales and apt's caches (keep man1, see above).
rm -rf "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/info/* "$ROOTFS"/usr/share/locale/* \
  "$ROOTFS"/var/cache/apt/* "$ROOTFS"/var/lib/apt/lists/*
find "$ROOTFS"/usr/share/man -mindepth 1 -maxdepth 1 ! -name man1 -exec rm -rf {} +
rm -rf "$ROOTFS"/usr/share/man/man1/*
tar -C "$ROOTFS" -c . | docker import --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' - "$TAG" >/dev/null
echo "base-image: built $TAG ($(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}'))" >&2
