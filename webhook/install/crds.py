"""The CustomResourceDefinitions of the policy objects, generated from the engine's JSON Schemas.

One schema per kind (webhook.engine.SCHEMAS, shipped as webhook/schemas/*.json) is what the loader
checks a rule file and a policy object against; the CRD's openAPIV3Schema is derived from it here so
that `kubectl explain` and the apiserver's own checks say the same. The apiserver demands a
*structural* schema (apiextensions.k8s.io/v1; "Specifying a structural schema" in the CRD docs):
every node typed, `properties` and `additionalProperties` never together, and `anyOf`/`oneOf`/`not`
only as value checks without types inside. JSON Schema draft 2020-12 says more than that, so:

- `const` becomes a one-value `enum`; a type is inferred for an `enum` without one;
- `additionalProperties: false` is dropped (the apiserver prunes unknown fields, and kubectl's
  default `--validate=strict` refuses them at apply);
- a node whose alternatives differ in type (a kind given as a name or as an API mapping, a
  mutation's arguments or `{fromParam}`) keeps what every alternative shares and
  `x-kubernetes-preserve-unknown-fields`; `if`/`then`/`not` and `allOf` are left out;
- `metadata` is `type: object` (the apiserver validates ObjectMeta itself);
- every list, string and map carries the JSON Schema's size bound (maxItems, maxLength, maxProperties;
  webhook/engine/schema.py says why each), a string enum its longest value, and a map's key bound
  (`propertyNames.maxLength`) becomes an `x-kubernetes-validations` rule, whose cost the apiserver
  estimates from those bounds at CRD create. `crd()` refuses a schema with an unbounded node: a
  namespace user's object is refused by size in the apiserver, before any webhook is called;
- scalar defaults stay: the apiserver stores them, the same values the loader assumes, so the
  printer columns (action, failurePolicy) say what every rule does.

What the CRD cannot say is checked by the server's validating webhook for policy objects, with the
same loader and lint (`policies.gpu-webhook.io`, webhook/policies/admission.py): a broken policy
is refused at `kubectl apply` with the loader's field paths.

`manifests/base/crds.yaml` is this module's output (`python -m webhook.commands.generate crds >
manifests/base/crds.yaml`; tests/deploy fails when it is stale).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.engine.documents import POLICY_RESOURCES, SCHEMAS, PolicyResource
from webhook.kubeyaml import styles

CATEGORY = "gpu-webhook"  # `kubectl get gpu-webhook` lists every policy object
RESOURCES = tuple(POLICY_RESOURCES.values())

# The status the servers write and the envelope: bounds of Kubernetes' own (kubernetes/kubernetes,
# staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go, metav1.Condition: type 316, reason 1024,
# message 32768; a pod name and an API group are DNS-1123 subdomains, 253; a kind 63).
MAX_REPLICAS = 256  # byPod entries: one per server replica
NAME_MAX, KIND_MAX, TEXT_MAX = 253, 63, 1_024
_CONDITION_MESSAGE_MAX = 32_768
_DROPPED = frozenset({"$schema", "$id", "title", "if", "then", "else", "not", "allOf", "$comment", "examples"})
_PRESERVE = "x-kubernetes-preserve-unknown-fields"
_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def structural(node: Mapping[str, Any]) -> dict[str, Any]:
    """A structural openAPIV3Schema node for one JSON Schema node (see the module docstring)."""
    out: dict[str, Any] = {}
    kind = node.get("type")
    if isinstance(kind, list):  # ["object", "null"]: nullable
        types = [t for t in kind if t != "null"]
        kind = types[0] if len(types) == 1 else None
        if "null" in node["type"]:
            out["nullable"] = True
    if "const" in node:
        out["enum"] = [node["const"]]
    if "enum" in node:
        out["enum"] = list(node["enum"])
    if kind is None and "enum" in out:
        found = {_TYPES.get(type(value)) for value in out["enum"]}
        kind = found.pop() if len(found) == 1 else None
    if kind == "string" and "enum" in out and "maxLength" not in node:
        out["maxLength"] = max(len(str(value)) for value in out["enum"])  # what CEL cost estimates read
    alternatives = [b for key in ("anyOf", "oneOf") for b in node.get(key) or ()]
    value_checks = all(set(b) <= {"required"} for b in alternatives)
    if alternatives and not value_checks:
        shared = {b.get("type") for b in alternatives}
        if kind is None and len(shared) == 1 and isinstance(next(iter(shared)), str):
            kind = shared.pop()
        out[_PRESERVE] = True
    elif alternatives:
        for key in ("anyOf", "oneOf"):
            if key in node:
                out[key] = [dict(b) for b in node[key]]
    for key in ("description", "pattern", "maxLength", "minLength", "minItems", "maxItems"):
        if key in node:
            out[key] = node[key]
    for key in ("minProperties", "maxProperties"):
        if key in node and kind == "object":
            out[key] = node[key]
    if node.get("format") == "date-time":
        out["format"] = "date-time"
    if kind is not None:
        out["type"] = kind
    if kind == "object":
        properties = node.get("properties")
        extra = node.get("additionalProperties")
        if properties:
            out["properties"] = {name: structural(child) for name, child in properties.items()}
            required = [name for name in node.get("required") or () if name in properties]
            if required:
                out["required"] = required
        elif isinstance(extra, Mapping):
            out["additionalProperties"] = structural(extra)
            key_max = (node.get("propertyNames") or {}).get("maxLength")
            if key_max:  # a CRD schema cannot bound a map's keys; the apiserver's CEL can, within its cost budget
                out["x-kubernetes-validations"] = [
                    {"rule": f"self.all(k, k.size() <= {key_max})", "message": f"keys are at most {key_max} characters"}
                ]
        else:
            out[_PRESERVE] = True
    elif kind == "array":
        items = node.get("items")
        out["items"] = structural(items) if isinstance(items, Mapping) else {_PRESERVE: True}
    elif kind is None:
        out[_PRESERVE] = True
    if "default" in node and kind in ("string", "boolean", "integer", "number") and not out.get(_PRESERVE):
        out["default"] = node["default"]  # stored explicit, so `kubectl get` shows e.g. the action of every rule
    return {key: value for key, value in out.items() if key not in _DROPPED}


def unbounded(node: Mapping[str, Any], path: str = "") -> list[str]:
    """The paths of the lists without maxItems, strings without maxLength and maps without maxProperties
    (a map: `additionalProperties`, or an object that keeps unknown fields) under `node`. `metadata`
    is the apiserver's: it bounds ObjectMeta itself."""
    found = []
    kind = node.get("type")
    if kind == "array" and "maxItems" not in node:
        found.append(path or ".")
    if kind == "string" and "maxLength" not in node:
        found.append(path or ".")
    is_map = "additionalProperties" in node or (kind == "object" and node.get(_PRESERVE) and path != ".metadata")
    if is_map and "maxProperties" not in node:
        found.append(path or ".")
    for name, child in (node.get("properties") or {}).items():
        if f"{path}.{name}" != ".metadata":
            found += unbounded(child, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), Mapping):
            found += unbounded(node[key], f"{path}[{key}]")
    return found


def _status_schema(resource: PolicyResource) -> dict[str, Any]:
    """What the server writes (webhook/policies/status.py): the Ready condition and each replica's view."""
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string", "maxLength": 316},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"], "maxLength": 7},
            "observedGeneration": {"type": "integer", "format": "int64"},
            "lastTransitionTime": {"type": "string", "format": "date-time", "maxLength": 64},
            "reason": {"type": "string", "maxLength": TEXT_MAX},
            "message": {"type": "string", "maxLength": _CONDITION_MESSAGE_MAX},
        },
    }
    replica = {
        "type": "object",
        "required": ["id"],
        "properties": {
            "id": {"type": "string", "maxLength": NAME_MAX, "description": "The server replica (its pod name)."},
            "observedGeneration": {
                "type": "integer",
                "format": "int64",
                "description": "The generation of this object the replica runs (absent: none).",
            },
            "ready": {
                "type": "boolean",
                "description": (
                    "The replica's last load included this generation (and, on a replica that manages the "
                    "registration, the live registration sends what its rules need)."
                ),
            },
            "reason": {
                "type": "string",
                "maxLength": TEXT_MAX,
                "description": (
                    "Why not: Invalid (this object), NotLoaded, or NotRegistered (loaded, but the live webhook "
                    "registration does not send what its rules need yet)."
                ),
            },
            "message": {"type": "string", "maxLength": _CONDITION_MESSAGE_MAX},
        },
    }
    return {
        "type": "object",
        "description": f"Written by the gpu-webhook server replicas: whether the {resource.kind} is in effect.",
        "properties": {
            "observedGeneration": {"type": "integer", "format": "int64"},
            "conditions": {
                "type": "array",
                "maxItems": 16,
                "items": condition,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "byPod": {
                "type": "array",
                "maxItems": MAX_REPLICAS,
                "items": replica,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["id"],
                "description": "One entry per server replica, as Gatekeeper's byPod.",
            },
        },
    }


def crd(resource: PolicyResource) -> dict[str, Any]:
    schema = SCHEMAS[resource.kind]
    spec = structural(schema["properties"]["spec"])
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string", "maxLength": NAME_MAX + 1 + KIND_MAX},
        "kind": {"type": "string", "maxLength": KIND_MAX},
        "metadata": {"type": "object"},
        "spec": spec,
    }
    version: dict[str, Any] = {"name": resource.version, "served": True, "storage": True}
    if resource.status:
        properties["status"] = _status_schema(resource)
        version["subresources"] = {"status": {}}
    root: dict[str, Any] = {"type": "object", "required": ["spec"], "properties": properties}
    loose = unbounded(root)
    if loose:  # a namespace user's object must be bounded everywhere before the apiserver stores it
        raise ValueError(f"{resource.crd_name}: no size bound on {', '.join(loose)}")
    if "description" in schema:
        root["description"] = schema["description"]
    version["schema"] = {"openAPIV3Schema": root}
    version["additionalPrinterColumns"] = [
        {"name": name, "type": kind, "jsonPath": path, **({"description": text} if text else {})}
        for name, kind, path, text in resource.columns
    ]
    singular = resource.kind.lower()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": resource.crd_name, "labels": {"app.kubernetes.io/name": "gpu-webhook"}},
        "spec": {
            "group": resource.group,
            "scope": "Namespaced" if resource.namespaced else "Cluster",
            "names": {
                "kind": resource.kind,
                "listKind": f"{resource.kind}List",
                "plural": resource.plural,
                "singular": singular,
                "shortNames": list(resource.short_names),
                "categories": [CATEGORY],
            },
            "versions": [version],
        },
    }


def crds() -> list[dict[str, Any]]:
    return [crd(resource) for resource in RESOURCES]


HEADER = """\
# Generated from the engine's JSON Schemas by `python -m webhook.commands.generate crds > manifests/base/crds.yaml`
# (webhook/install/crds.py says how a JSON Schema becomes a structural openAPIV3Schema); tests/deploy
# fails when it is stale. What a CRD schema cannot check, the server's `policies.gpu-webhook.io`
# validating webhook checks with the loader and lint, so a broken policy is refused at apply.
"""


def base_yaml() -> str:
    return HEADER + styles.REGISTRATION.dump_all(crds())
