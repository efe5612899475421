"""no-visible-devices-without-gpu's node-agent exemption with a site's params: the ServiceAccounts and
namespaces a site lists are node agents outside tenant namespaces, and never inside one.

The pack's suite (rules/tests/no-visible-devices-without-gpu.test.yaml) covers the DaemonSet forms
with the default (empty) lists; here a site fills them, as docs/operations.md says to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.rules.rulekit import RULES, namespace, run
from webhook.engine import load_rules

PLATFORM = namespace("monitoring")
OBSERVABILITY = namespace("observability")
TENANT = namespace("team-a", labels={"gpu-webhook.io/tenant": "true"})


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Any:
    directory: Path = tmp_path_factory.mktemp("rules")
    text = (RULES / "no-visible-devices-without-gpu.yaml").read_text()
    for default, listed in (
        ("nodeAgentServiceAccounts: []", "nodeAgentServiceAccounts: [monitoring/dcgm-exporter, team-a/dcgm-exporter]"),
        ("nodeAgentNamespaces: []", "nodeAgentNamespaces: [observability, team-a]"),
    ):
        assert default in text
        text = text.replace(default, listed)
    (directory / "rule.yaml").write_text(text)
    return load_rules(directory).require()


def deployment(namespace_name: str, account: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "exporter", "namespace": namespace_name},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {
                    "serviceAccountName": account,
                    "containers": [
                        {
                            "name": "main",
                            "image": "cuda:12",
                            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                        }
                    ],
                },
            },
        },
    }


def test_a_listed_node_agent_service_account_outside_tenants_is_exempt(site: Any) -> None:
    assert run(site, deployment("monitoring", "dcgm-exporter"), PLATFORM).allowed


def test_another_service_account_in_the_same_namespace_is_judged(site: Any) -> None:
    decision = run(site, deployment("monitoring", "metrics"), PLATFORM)
    assert not decision.allowed
    assert "sets NVIDIA_VISIBLE_DEVICES without requesting a GPU" in decision.denial_message


def test_a_listed_namespace_outside_tenants_is_exempt(site: Any) -> None:
    assert run(site, deployment("observability"), OBSERVABILITY).allowed


@pytest.mark.parametrize("account", ["dcgm-exporter", "default"])
def test_a_tenant_namespace_is_never_exempt_even_when_listed(site: Any, account: str) -> None:
    """team-a is listed as a node-agent namespace and its dcgm-exporter as a node-agent account: a site's
    mistake, and a tenant sets both fields of its own objects, so the tenant label wins."""
    assert not run(site, deployment("team-a", account), TENANT).allowed


def test_an_unknown_namespace_is_never_exempt(site: Any) -> None:
    assert not run(site, deployment("observability"), None).allowed
