#!/usr/bin/env bash
# Build envhub images with podman (no Docker engine needed):
#   deploy/docker/build.sh scienceworld [alfworld webshop searchqa trainer]  -> localhost/envhub-<name>:<version>
# Makes the local Debian base first when no registry can be pulled from (base.sh), uses runc and
# explicit ulimits (containers.conf), and hands pip the host's CA bundle as a build secret.
# Extra podman build flags go in BUILD_FLAGS (e.g. --build-arg ALFWORLD_GAMES=50).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers.conf}
BASE_IMAGE=${BASE_IMAGE:-localhost/envhub-debian:12-minbase}
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
TAG=${TAG:-$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/pyproject.toml")}
[ $# -gt 0 ] || set -- scienceworld

if [[ $BASE_IMAGE == localhost/* ]]; then
    BASE_IMAGE=$BASE_IMAGE "$here/base.sh"
fi
for target in "$@"; do
    if [ "$target" = trainer ]; then
        image=(--file "$here/trainer.Dockerfile" --target trainer)
    else
        image=(--file "$here/Dockerfile" --target server --build-arg "ENVIRONMENT=$target")
    fi
    # --network host: RUN steps reach the package mirrors the way the host does.
    # --format docker: the OCI format has no HEALTHCHECK.
    # shellcheck disable=SC2086
    podman build --pull=never --network host --layers --format docker \
        --build-arg "BASE_IMAGE=$BASE_IMAGE" --secret "id=pipca,src=$CA_BUNDLE" \
        "${image[@]}" --tag "localhost/envhub-$target:$TAG" ${BUILD_FLAGS:-} "$root"
done
