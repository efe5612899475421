"""A CA and serving pair for the Service, as `gpu-webhook certs` makes them, for `manifests --ca` beside the chart."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.certs import generate_bundle, service_dns_names, write_bundle


@pytest.fixture(scope="session")
def ca_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("helm-certs")
    write_bundle(generate_bundle(service_dns_names("gpu-webhook", "gpu-webhook")), directory)
    return directory
