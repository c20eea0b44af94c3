#!/usr/bin/env bash
# Lint deploy/ offline: hadolint and checkov on the Dockerfiles; every kustomization rendered with
# `kubectl kustomize`, validated strictly against the Kubernetes schemas (deploy/validate_manifests.py)
# and scanned by checkov. The linters live in their own venv ($DEPLOY_VENV, default .venv-deploy).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=${DEPLOY_VENV:-$root/.venv-deploy}
PY=${PY:-python3}

command -v kubectl >/dev/null || { echo "kubectl is missing: apt-get install kubectl" >&2; exit 1; }
stamp=$venv/.installed-$(sha1sum deploy/requirements-lint.txt | cut -c1-12)
if [ ! -f "$stamp" ]; then
    test -x "$venv/bin/python" || "$PY" -m venv "$venv"
    "$venv/bin/pip" install -q -r deploy/requirements-lint.txt
    touch "$stamp"
fi
bin=$venv/bin

echo "== hadolint"
"$bin/hadolint" --config deploy/docker/.hadolint.yaml deploy/docker/*Dockerfile

rendered=$(mktemp -d)
trap 'rm -rf "$rendered"' EXIT
echo "== kubectl kustomize"
while read -r dir; do
    out=$rendered/$(echo "${dir#deploy/k8s}" | tr / _ | sed 's/^_//; s/^$/all/').yaml
    kubectl kustomize "$dir" > "$out"
    echo "$dir -> $(grep -c '^kind:' "$out") resources"
done < <(find deploy/k8s -name kustomization.yaml -printf '%h\n' | sort)

echo "== kubernetes schemas (strict; unknown kinds fail)"
"$bin/python" deploy/validate_manifests.py "$rendered"/*.yaml

echo "== checkov"
# offline: no policy metadata download, no update check
BC_SKIP_MAPPING=TRUE CKV_SKIP_PACKAGE_UPDATE_CHECK=TRUE "$bin/checkov" --config-file deploy/checkov.yaml \
    --skip-download --quiet --compact \
    --file "$rendered/all.yaml" --file deploy/docker/Dockerfile --file deploy/docker/trainer.Dockerfile
echo "deploy checks passed"
