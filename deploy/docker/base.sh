#!/usr/bin/env bash
# Make the local base image when no registry can be pulled from: a Debian 12 minbase root file
# system made by debootstrap and imported into podman's store as $BASE_IMAGE (skipped when present).
# Mirror: the host's own Debian mirror (from its apt sources) unless DEBIAN_MIRROR is set.
set -euo pipefail
BASE_IMAGE=${BASE_IMAGE:-localhost/envhub-debian:12-minbase}
SUITE=${SUITE:-bookworm}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$(cd "$(dirname "$0")" && pwd)/containers.conf}

if podman image exists "$BASE_IMAGE"; then
    echo "base image $BASE_IMAGE already present"
    exit 0
fi
mirror=${DEBIAN_MIRROR:-$(grep -hoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
    | head -1 | grep -oE 'https?://[^ ]+' || true)}
if [ -z "$mirror" ]; then
    echo "no Debian mirror in the host's apt sources: set DEBIAN_MIRROR" >&2
    exit 1
fi
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
# python3 and ca-certificates in the base save every image an apt-get round trip.
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates "$SUITE" "$rootfs" "$mirror"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
# Images built on this base run apt-get against the same mirror.
echo "deb $mirror $SUITE main" > "$rootfs/etc/apt/sources.list"
tar -C "$rootfs" --numeric-owner -c . | podman import --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE"
echo "imported $BASE_IMAGE"
