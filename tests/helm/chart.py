"""The chart through Helm v4 itself (helm-python-sdk's libhelm_c.so), and `gpu-webhook manifests` beside it, for tests/helm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import REPO
from webhook.commands.manifests import render

helm = pytest.importorskip("helm_python", reason="helm-python-sdk not installed (the test extra pins it)")

CHART = REPO / "manifests" / "helm" / "gpu-webhook"
MANIFESTS = REPO / "manifests"
NAMESPACE = "gpu-webhook"
IMAGE = "registry.example.com/gpu-webhook@sha256:" + "1" * 64
Object = dict[str, Any]


def load() -> Any:
    return helm.Chart.load(CHART)


def template(values: dict[str, Any] | None = None, namespace: str = NAMESPACE) -> list[Object]:
    """`helm template gpu-webhook CHART -n NAMESPACE` with VALUES: every object rendered (NOTES aside)."""
    rendered = load().render(values or {}, name="gpu-webhook", namespace=namespace, is_install=True)
    return [
        doc
        for path, text in sorted(rendered.items())
        if not path.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def manifests(overlay: str, components: list[str], ca_dir: Path | None, image: str | None = None) -> list[Object]:
    """`gpu-webhook manifests` as the chart is meant to equal it: without the Namespace (`--create-namespace`)."""
    return [
        o
        for o in render(MANIFESTS, overlay, components, ca_dir, None, image)
        if o["kind"] not in ("Namespace", "CustomResourceDefinition")
    ]


def comparable(objects: list[Object]) -> dict[tuple[str, str], Object]:
    """By (kind, name), with what two renders never share left out: each made its own CA and serving pair."""
    out = {}
    for obj in objects:
        obj = yaml.safe_load(yaml.safe_dump(obj))  # a copy
        if obj["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for webhook in obj["webhooks"]:
                assert webhook["clientConfig"].pop("caBundle", "x"), "an empty caBundle"
        if obj["kind"] == "Secret" and obj.get("type") == "kubernetes.io/tls":
            obj["data"] = sorted(obj["data"])
        out[obj["kind"], obj["metadata"]["name"]] = obj
    return out
