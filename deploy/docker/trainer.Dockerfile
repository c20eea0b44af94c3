# syntax=docker/dockerfile:1
# The GPU trainer: envhub's trainer with vLLM generation, Ray 2.60 (the KubeRay RayJob's head and
# workers run this image). CUDA comes with the PyPI wheels (torch, vLLM's kernel packages); the host
# needs the NVIDIA driver and container toolkit. wget is there for the readiness and liveness probes
# KubeRay (1.1 and later) injects into Ray pods. Build from the repository root:
#   deploy/docker/build.sh trainer
ARG BASE_IMAGE=docker.io/library/debian:12.11-slim

FROM ${BASE_IMAGE} AS python
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates wget \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 envhub \
    && useradd --system --uid 10001 --gid envhub --home-dir /home/ray --create-home --shell /bin/bash envhub \
    && python3 -m venv /opt/envhub
ENV PATH=/opt/envhub/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

FROM python AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential python3-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY deploy/docker/requirements/ requirements/
# An optional build secret "pipca" is a CA bundle for pip (hosts behind a TLS-inspecting proxy).
RUN --mount=type=secret,id=pipca,required=false \
    if [ -s /run/secrets/pipca ]; then export PIP_CERT=/run/secrets/pipca; fi \
    && pip install --no-deps --require-virtualenv -r requirements/trainer-gpu.txt
COPY pyproject.toml README.md ./
COPY protos/ protos/
COPY envhub/ envhub/
COPY trainer/ trainer/
RUN pip install --no-deps --no-build-isolation --require-virtualenv . \
    && python -m compileall -q /opt/envhub/lib

FROM python AS trainer
COPY --from=build /opt/envhub /opt/envhub
# vLLM forks its engine after gRPC channels exist unless told to spawn (docs/gpu.md).
ENV VLLM_WORKER_MULTIPROC_METHOD=spawn \
    RAY_AUTH_MODE=disabled \
    HOME=/home/ray
WORKDIR /home/ray
USER 10001:10001
HEALTHCHECK NONE
CMD ["trainer", "--help"]
