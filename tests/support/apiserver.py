"""AdmissionReviews shaped like the ones a kube-apiserver really sends, and the Namespace the cache holds.

The reviews of tests/support/reviews.py carry what a user writes. The apiserver sends more:
by the time a mutating webhook is called, the object has been defaulted (pkg/apis/core/v1
defaults.go: SetDefaults_PodSpec, SetDefaults_Container, probe and port defaults), the built-in
mutating admission plugins have run (ServiceAccount: the kube-api-access projected volume and its
mounts; DefaultTolerationSeconds: the not-ready/unreachable tolerations; Priority: `priority` and
`preemptionPolicy`), and the field manager has written `managedFields`. The request carries
`userInfo` and `options` too. The validating webhook additionally sees what the registry's
BeforeCreate fills (uid, creationTimestamp, status.qosClass). Those are the fields every variable
conversion into CEL pays for, so the server's real cost is measured on these.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def _managed_fields(manager: str, operation: str, fields: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "manager": manager,
            "operation": operation,
            "apiVersion": "v1",
            "time": "2026-11-23T09:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        }
    ]


def _fields_v1(value: Any) -> Any:
    """A FieldsV1 set for a plain object, shaped like the field manager's (f:name keys, {} leaves)."""
    if isinstance(value, dict):
        return {f"f:{key}": _fields_v1(item) for key, item in value.items()}
    if isinstance(value, list):
        out: dict[str, Any] = {}
        for item in value:
            key = f'k:{{"name":"{item["name"]}"}}' if isinstance(item, dict) and "name" in item else "."
            out[key] = _fields_v1(item) if isinstance(item, dict) else {}
        return out
    return {}


def _default_probe(probe: dict[str, Any]) -> None:
    probe.setdefault("timeoutSeconds", 1)
    probe.setdefault("periodSeconds", 10)
    probe.setdefault("successThreshold", 1)
    probe.setdefault("failureThreshold", 3)
    if "httpGet" in probe:
        probe["httpGet"].setdefault("scheme", "HTTP")


def _default_container(container: dict[str, Any], volume: str) -> None:
    image = str(container.get("image", ""))
    tag = image.rsplit("/", 1)[-1]
    container.setdefault("imagePullPolicy", "Always" if ":" not in tag or tag.endswith(":latest") else "IfNotPresent")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    for port in container.get("ports", []):
        port.setdefault("protocol", "TCP")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if probe in container:
            _default_probe(container[probe])
    limits = container["resources"].get("limits")
    if limits:  # SetDefaults_Pod: a limit without a request defaults the request
        requests = container["resources"].setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)
    container.setdefault("volumeMounts", []).append(
        {"name": volume, "readOnly": True, "mountPath": SERVICE_ACCOUNT_MOUNT}
    )


def defaulted_pod(pod: dict[str, Any], validating: bool = False) -> dict[str, Any]:
    """`pod` as a webhook receives it: defaulted, through the built-in plugins, with managedFields."""
    out = copy.deepcopy(pod)
    spec = out["spec"]
    metadata = out["metadata"]
    metadata["managedFields"] = _managed_fields(
        "kubectl-create",
        "Update",
        {
            "f:metadata": _fields_v1({k: v for k, v in metadata.items() if k in ("labels", "annotations")}),
            "f:spec": _fields_v1(spec),
        },
    )
    volume = "kube-api-access-7x2kq"
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("serviceAccountName", "default")
    spec["serviceAccount"] = spec["serviceAccountName"]
    spec["priority"] = 0
    spec["preemptionPolicy"] = "PreemptLowerPriority"
    for container in spec.get("initContainers", []) + spec["containers"]:
        _default_container(container, volume)
    for existing in spec.setdefault("volumes", []):
        if "configMap" in existing:
            existing["configMap"].setdefault("defaultMode", 420)
    spec["volumes"].append(
        {
            "name": volume,
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                }
                            ]
                        }
                    },
                ],
            },
        }
    )
    spec.setdefault("tolerations", []).extend(
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    )
    out["status"] = {}
    if validating:  # the registry's BeforeCreate runs between the two webhook phases
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = "2026-11-23T09:00:00Z"
        out["status"] = {"phase": "Pending", "qosClass": "Burstable"}
    return out


def namespace(name: str = "team-a") -> dict[str, Any]:
    """A tenant Namespace as the watch cache holds it (labels, annotations, managedFields, status)."""
    labels = {
        "kubernetes.io/metadata.name": name,
        "gpu-webhook.io/tenant": "true",
        "gpu-webhook.io/queue-required": "true",
        "team": name,
        "pod-security.kubernetes.io/enforce": "baseline",
    }
    annotations = {
        "gpu-webhook.io/queue-name": f"{name}-queue",
        "gpu-webhook.io/allowed-priority-classes": "gpu-batch,gpu-critical",
        "gpu-webhook.io/cost-center": "cc-1234",
    }
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "uid": "0b6f3c54-8d0e-4a57-9d3e-1f1f5a0c1e11",
            "resourceVersion": "123456",
            "creationTimestamp": "2026-01-05T10:00:00Z",
            "labels": labels,
            "annotations": annotations,
            "managedFields": _managed_fields(
                "kubectl-client-side-apply",
                "Update",
                {"f:metadata": _fields_v1({"labels": labels, "annotations": annotations})},
            ),
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def defaulted_object(obj: dict[str, Any], validating: bool = False) -> dict[str, Any]:
    """Any other kind as a webhook receives it: with managedFields (and a uid once validating).

    Its pod templates are left as written: the apiserver defaults them too, but the Pod is the
    object every GPU workload ends in, and the one each of its creates is measured on.
    """
    out = copy.deepcopy(obj)
    metadata = out["metadata"]
    metadata["managedFields"] = _managed_fields(
        "kubectl-create",
        "Update",
        {
            "f:metadata": _fields_v1({k: v for k, v in metadata.items() if k == "labels"}),
            "f:spec": _fields_v1(out.get("spec", {})),
        },
    )
    if validating:
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = "2026-11-23T09:00:00Z"
    return out


def review(pod: dict[str, Any], validating: bool = False) -> dict[str, Any]:
    """The AdmissionReview for creating `pod` (or another kind), as the apiserver sends it to one phase."""
    obj = defaulted_pod(pod, validating) if pod["kind"] == "Pod" else defaulted_object(pod, validating)
    metadata = obj["metadata"]
    group, _, version = obj["apiVersion"].rpartition("/")
    gvk = {"group": group, "version": version, "kind": obj["kind"]}
    gvr = {"group": group, "version": version, "resource": obj["kind"].lower() + "s"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": metadata.get("name", ""),
            "namespace": metadata["namespace"],
            "operation": "CREATE",
            "userInfo": {
                "username": "alice@example.com",
                "uid": "7c1e0d8e-4f5b-4a8b-9a55-3f8c2d1b6e01",
                "groups": ["team-a-developers", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/credential-id": ["X509SHA256=4f1c0d"]},
            },
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {
                "apiVersion": "meta.k8s.io/v1",
                "kind": "CreateOptions",
                "fieldManager": "kubectl-create",
                "fieldValidation": "Strict",
            },
        },
    }
