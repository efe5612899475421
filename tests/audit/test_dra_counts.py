"""audit counts a pod's accelerators as the engine does: resources and the devices of its DRA claims."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.audit.conftest import PACK_RULES

TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "two-gpus", "namespace": "team-a"},
    "spec": {
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]}
        }
    },
}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "dra-trainer", "namespace": "team-a"},
    "spec": {
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}],
        "containers": [{"name": "main", "image": "cuda:12", "resources": {"claims": [{"name": "gpus"}]}}],
    },
}


def test_claim_devices_are_counted_in_the_report(run, tmp_path: Path) -> None:
    # was: audit counted resources only, so a DRA pod's 2 GPUs were reported as 0 (the engine said 2)
    manifest = tmp_path / "dra.yaml"
    manifest.write_text(yaml.safe_dump_all([TEMPLATE, POD]))
    _, out, _ = run(str(manifest), "--rules", PACK_RULES, "-o", "json")
    report = json.loads(out)
    (pod,) = [o for o in report["objects"] if o["kind"] == "Pod"]
    assert pod["gpus"] == 2
