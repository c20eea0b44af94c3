"""`envhub bench --profile kube`: the deploy/k8s manifests played with podman on one machine."""
