# gpu-webhook container image.
#
# Two stages: a builder with pip that turns the project and its dependencies into wheels and
# installs them into one directory; a distroless runtime with only the Python 3.11
# interpreter, its standard library, glibc/libstdc++, CA certificates and tzdata. No shell,
# no package manager, no pip: nothing the server does not need (an `exec` into the container
# has nothing to run). Both stages are Debian 12 with Python 3.11, so the compiled wheels
# (cryptography, orjson, aiohttp, google-re2, cel-expr-python) match the runtime's glibc and ABI.
# Pin both base images by digest in your build (FROM image@sha256:...).

FROM python:3.11-slim-bookworm AS builder
# the build context has no .git: pass the version (`--build-arg VERSION=$(python -m setuptools_scm)`);
# without it the package says 0+unknown (setup.py)
ARG VERSION=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 SETUPTOOLS_SCM_PRETEND_VERSION=${VERSION}
WORKDIR /src
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY webhook ./webhook
# setup.py ships these two inside the wheel (the default rule pack, `gpu-webhook manifests`)
COPY rules ./rules
COPY manifests ./manifests
# bytecode is compiled here, because the runtime's root filesystem is read-only
RUN pip wheel --wheel-dir /wheels . \
 && pip install --no-index --find-links /wheels --target /opt/gpu-webhook gpu-webhook \
 && python -m compileall -q /opt/gpu-webhook

FROM gcr.io/distroless/python3-debian12:nonroot
# the packages installed above, importable without a virtualenv (whose scripts would point at
# the builder's interpreter path)
COPY --from=builder /opt/gpu-webhook /opt/gpu-webhook
# defaults for a bare `docker run`; in a cluster the rules ConfigMap is mounted over them
COPY rules /etc/gpu-webhook/rules
ENV PYTHONPATH=/opt/gpu-webhook \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    GPU_WEBHOOK_RULES=/etc/gpu-webhook/rules
# distroless "nonroot": numeric, so kubelet can check runAsNonRoot without /etc/passwd
USER 65532:65532
EXPOSE 8443 9090
# `gpu-webhook serve` (the console script's shebang would name the builder's python; -m does not).
# Writable paths come only from mounts: certificates from the TLS Secret, rules from the
# ConfigMap. No HEALTHCHECK: the kubelet probes /readyz and /healthz.
ENTRYPOINT ["python3", "-m", "webhook.cli", "serve", "--host", "0.0.0.0", "--cert-dir", "/etc/gpu-webhook/tls", "--rules", "/etc/gpu-webhook/rules"]
