"""JSON Schemas of the documents in a rules directory; the loader, lint and editors share them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .mutate import MUTATIONS
from .policy import LabelSelector
from .workloads import KIND_GROUPS, KIND_TABLE

API_VERSION = "gpu-webhook.io/v1alpha1"
POLICY_KIND = "GPUPolicy"
CONFIG_KIND = "GPUWebhookConfig"
TEST_KIND = "GPUPolicyTest"
OVERLAY_KIND = "GPUPolicyOverlay"
EXCEPTION_KIND = "GPUPolicyException"
OPERATIONS_ENUM = ["CREATE", "UPDATE", "DELETE", "CONNECT", "*"]
# the kind groups a rule can name in match.kinds, with what each stands for
GROUPS_SAID = "; ".join(f"{name}, {KIND_GROUPS[name]}" for name in KIND_TABLE.groups)

# Size bounds. A GPUPolicyException is written by namespace users, and every list, string and map of
# the policy kinds carries a bound, so that the apiserver refuses an oversized object against its CRD
# schema before any webhook sees it (webhook/install/crds.py copies them), and the loader says the same
# of a file. Kubernetes' own limits where a field holds a Kubernetes value (kubernetes/kubernetes,
# staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go): a DNS-1123 subdomain (object and
# rule names) 253, a DNS-1123 label (namespaces) 63, a label value 63, a qualified name (label keys)
# 253 of prefix + '/' + 63. The rest are ceilings far above any real use and far below what would cost
# the server: a CEL string 64 KiB (the pack's longest expression is under 2 KiB), a message 4 KiB.
NAME_MAX = 253  # DNS-1123 subdomain: object and rule names, object names in an exception
NAMESPACE_MAX = 63  # DNS-1123 label
LABEL_KEY_MAX = 317  # qualified name: DNS-1123 subdomain prefix, '/', a 63-character name
LABEL_VALUE_MAX = 63
KIND_MAX = 63  # a kind's lower-case form is a DNS-1035 label (CRD names.kind)
CEL_MAX = 65_536  # one CEL expression (condition, validate, messageExpression)
MESSAGE_MAX = 4_096  # a rule's message; kubectl prints it whole
TEXT_MAX = 1_024  # a short human text: an exception's reason, a description-like value
LIST_MAX = 256  # names or values in one list (kinds, object names, selector values)
SELECTOR_MAX = 64  # matchLabels entries, matchExpressions
NAMESPACE_LIST_MAX = 1_024  # a rule's namespaces include/exclude: sites list many
EXCEPTION_RULES_MAX = 128  # the pack has 32 rules; an exception of more is a namespace's opt-out of policy
RULE_ITEMS_MAX = 1_024  # an overlay's rules, a rule's kinds or mutations
PARAMS_MAX = 256  # entries of a rule's params


def _strings(length: int, items: int = LIST_MAX) -> dict[str, Any]:
    return {"type": "array", "maxItems": items, "items": {"type": "string", "maxLength": length}}


_STRINGS = _strings(NAME_MAX)
_LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {
            "type": "object",
            "maxProperties": SELECTOR_MAX,
            "propertyNames": {"maxLength": LABEL_KEY_MAX},
            "additionalProperties": {"type": "string", "maxLength": LABEL_VALUE_MAX},
        },
        "matchExpressions": {
            "type": "array",
            "maxItems": SELECTOR_MAX,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string", "maxLength": LABEL_KEY_MAX},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": _strings(LABEL_VALUE_MAX),
                },
            },
        },
    },
}
_NAMESPACES = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "include": _strings(NAMESPACE_MAX, NAMESPACE_LIST_MAX),
        "exclude": _strings(NAMESPACE_MAX, NAMESPACE_LIST_MAX),
    },
}
# A mutation's arguments may come whole from the rule's params, so sites configure values, not rules.
_FROM_PARAM = {
    "type": "object",
    "additionalProperties": False,
    "required": ["fromParam"],
    "properties": {"fromParam": {"type": "string", "maxLength": NAME_MAX}},
}
_METADATA_FIELDS: dict[str, Any] = {
    "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": NAME_MAX},
    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": LABEL_VALUE_MAX}},
}
_METADATA = {"type": "object", "required": ["name"], "properties": _METADATA_FIELDS}


def _document(
    kind: str,
    spec: dict[str, Any],
    *,
    file: str | None = None,
    description: str | None = None,
    metadata: dict[str, Any] = _METADATA,
    metadata_required: bool = True,
) -> dict[str, Any]:
    """The schema of a `kind` document: apiVersion, kind, metadata and `spec`, nothing else; `file`
    names it for editors ($id), as webhook/schemas/ ships it."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **({"$id": f"https://gpu-webhook.io/schemas/{file}"} if file else {}),
        "title": kind,
        **({"description": description} if description else {}),
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", *(["metadata"] if metadata_required else []), "spec"],
        "properties": {
            "apiVersion": {"const": API_VERSION},
            "kind": {"const": kind},
            "metadata": metadata,
            "spec": spec,
        },
    }


POLICY_SCHEMA: dict[str, Any] = _document(
    POLICY_KIND,
    {
        "type": "object",
        "additionalProperties": False,
        "required": ["match"],
        "anyOf": [{"required": ["validate"]}, {"required": ["mutate"]}],
        "properties": {
            "action": {"enum": ["Deny", "Warn", "Audit"], "default": "Deny"},
            "exceptable": {
                "type": "boolean",
                "default": True,
                "description": "false: no GPUPolicyException may name this rule (lint refuses one, and "
                "evaluation ignores one that reached the cluster). For rules whose whole point is that no "
                "tenant is exempt, such as privileged containers.",
            },
            "failurePolicy": {"enum": ["Fail", "Ignore"], "default": "Fail"},
            "onMissingContext": {"enum": ["Allow", "Deny", "Evaluate"], "default": "Allow"},
            "autogen": {"type": "boolean", "default": True},
            "ratcheting": {
                "type": "boolean",
                "default": True,
                "description": "On UPDATE the rule acts only when the update changed a field it reads or "
                "writes, and a Deny rule denies only violations the old object did not already have (as "
                "Kubernetes ratchets CRD validation, KEP-4008). false: re-check and re-mutate every UPDATE "
                "in full (the webhook registration then sends every UPDATE).",
            },
            "match": {
                "type": "object",
                "additionalProperties": False,
                "required": ["kinds"],
                "properties": {
                    "kinds": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": RULE_ITEMS_MAX,
                        "description": "Kinds the rule targets: a name from the kind table (Pod, Job, JobSet, "
                        "RayService, ...; '*' for all of them), a group of the table's kinds ({kindGroup: "
                        f"NAME}}: {GROUPS_SAID}), or, for any other kind, its API as a mapping "
                        "so that the webhook registration can ask the apiserver to send it.",
                        "items": {
                            "oneOf": [
                                {"type": "string", "minLength": 1, "maxLength": KIND_MAX},
                                {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["kindGroup"],
                                    "properties": {"kindGroup": {"enum": list(KIND_TABLE.groups)}},
                                },
                                {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["kind", "group", "version", "resource"],
                                    "properties": {
                                        "kind": {"type": "string", "minLength": 1, "maxLength": KIND_MAX},
                                        "group": {
                                            "type": "string",
                                            "maxLength": NAME_MAX,
                                            "description": "'' for the core API",
                                        },
                                        "version": {"type": "string", "minLength": 1, "maxLength": KIND_MAX},
                                        "resource": {
                                            "type": "string",
                                            "pattern": "^[a-z0-9.-]+$",
                                            "maxLength": KIND_MAX,
                                            "description": "the plural resource name, e.g. services",
                                        },
                                    },
                                },
                            ]
                        },
                    },
                    "operations": {
                        "type": "array",
                        "maxItems": len(OPERATIONS_ENUM),
                        "items": {"enum": OPERATIONS_ENUM},
                    },
                    "namespaces": _NAMESPACES,
                    "namespaceSelector": _LABEL_SELECTOR,
                    "objectSelector": _LABEL_SELECTOR,
                    "gpu": {"type": "boolean"},
                    "condition": {"type": "string", "maxLength": CEL_MAX},
                },
            },
            "validate": {
                "type": "object",
                "additionalProperties": False,
                "required": ["expression"],
                "properties": {
                    "expression": {"type": "string", "maxLength": CEL_MAX},
                    "message": {"type": "string", "maxLength": MESSAGE_MAX},
                    "messageExpression": {"type": "string", "maxLength": CEL_MAX},
                },
            },
            "mutate": {
                "type": "array",
                "maxItems": RULE_ITEMS_MAX,
                "items": {
                    "type": "object",
                    "minProperties": 1,
                    "maxProperties": 1,
                    "additionalProperties": False,
                    "properties": {
                        name: {"anyOf": [kind.schema, _FROM_PARAM], "maxProperties": PARAMS_MAX}
                        for name, kind in MUTATIONS.items()
                    },
                },
            },
            "params": {"type": "object", "maxProperties": PARAMS_MAX},
            "paramsSchema": {
                "type": "object",
                "maxProperties": PARAMS_MAX,
                "description": "The params' schema, a subset of JSON Schema (type, enum, minimum/maximum, "
                "minLength/maxLength, pattern, minItems/maxItems, items, properties, additionalProperties, "
                "required): the params, after every overlay, must fit it, and lint type-checks each expression "
                "that reads params.NAME with its type. Without it, the types of the params given here serve.",
            },
        },
    },
    file="gpupolicy.json",
)

CONFIG_SCHEMA: dict[str, Any] = _document(
    CONFIG_KIND,
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "acceleratorResources": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string"},
                "description": "Extended resource names that hand out accelerator devices, one per unit; "
                "`prefix*` patterns. A DeviceClass's spec.extendedResourceName (DRA extended resources) "
                "belongs here; deviceclass.resource.kubernetes.io/<class> counts for every accelerator "
                "DeviceClass without it.",
            },
            "acceleratorDeviceClasses": {
                "type": "array",
                "items": {"type": "string"},
                "description": "DRA DeviceClass names whose devices count as accelerators; `prefix*` "
                "patterns. Default: gpu.nvidia.com, mig.nvidia.com, vfio.gpu.nvidia.com, gpu.amd.com, "
                "gpu.intel.com.",
            },
            "acceleratorShareResources": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Resource names that give a share of a GPU's memory or compute, not devices "
                "(Volcano, HAMi): a container asking for one has a GPU, counted as one device unless it asks "
                "for device resources as well; `prefix*` patterns. Default: volcano.sh/gpu-memory, "
                "volcano.sh/vgpu-memory, volcano.sh/vgpu-memory-percentage, volcano.sh/vgpu-cores, "
                "nvidia.com/gpumem, nvidia.com/gpumem-percentage, nvidia.com/gpucores.",
            },
            "acceleratorSliceResources": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Accelerator resources whose devices are parts of one GPU, left out of "
                "targetWholeGpuCount; `prefix*` patterns. Default: nvidia.com/mig-*, nvidia.com/gpu.shared, "
                "volcano.sh/vgpu-number.",
            },
            "acceleratorSliceDeviceClasses": {
                "type": "array",
                "items": {"type": "string"},
                "description": "DRA DeviceClasses whose devices are parts of one GPU (left out of "
                "targetWholeGpuCount); `prefix*` patterns. Default: mig.nvidia.com.",
            },
            "gpuAllocators": {
                "type": "array",
                "maxItems": 32,
                "description": "GPU allocators that mark a container with pod annotations rather than a resource "
                "or a DRA claim (resources.py Allocator); added to the shipped one (kai-scheduler), an entry of "
                "the same name replaces it, `enabled: false` turns it off.",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name"],
                    # an allocator names its annotations, unless the entry only turns one off
                    "anyOf": [
                        {"required": ["podAnnotations"]},
                        {"required": ["enabled"], "properties": {"enabled": {"const": False}}},
                    ],
                    "properties": {
                        "name": {"type": "string", "minLength": 1, "maxLength": 63},
                        "enabled": {"type": "boolean", "description": "false: the allocator of this name is off."},
                        "podAnnotations": {
                            "type": "array",
                            "minItems": 1,
                            "items": {"type": "string", "minLength": 1},
                            "description": "A pod with any of these annotations has the allocator's GPU.",
                        },
                        "schedulerNames": {
                            "type": "array",
                            "items": {"type": "string", "minLength": 1},
                            "description": "Only pods of these schedulers have it (empty: any scheduler).",
                        },
                        "containerAnnotation": {
                            "type": "string",
                            "description": "The pod annotation naming the allocated container (init containers "
                            "first); without it, the first app container.",
                        },
                        "devicesAnnotation": {
                            "type": "string",
                            "description": "The pod annotation giving how many devices the container counts "
                            "(default 1); never whole GPUs.",
                        },
                        "env": {
                            "type": "array",
                            "items": {"type": "string", "minLength": 1},
                            "description": "Device variables the allocator writes into the allocated container "
                            "as valueFrom.configMapKeyRef; such entries are not the tenant's, a literal value is.",
                        },
                        "configMapAnnotation": {
                            "type": "string",
                            "description": "The pod annotation whose value, and a dash, starts the name of every "
                            "ConfigMap of the allocator's (empty: any ConfigMap).",
                        },
                    },
                },
            },
        },
    },
    metadata_required=False,
)

_RULE_NAME = {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": NAME_MAX}
_OVERLAY_RULE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": {**_RULE_NAME, "description": "The GPUPolicy's metadata.name; the pack must have it."},
        "enabled": {"type": "boolean", "description": "false: the rule is left out (not loaded, not registered)."},
        "action": {"enum": ["Deny", "Warn", "Audit"], "description": "Replaces spec.action."},
        "failurePolicy": {"enum": ["Fail", "Ignore"], "description": "Replaces spec.failurePolicy."},
        "onMissingContext": {
            "enum": ["Allow", "Deny", "Evaluate"],
            "description": "Replaces spec.onMissingContext.",
        },
        "exceptable": {"type": "boolean", "description": "Replaces spec.exceptable."},
        "params": {
            "type": "object",
            "maxProperties": PARAMS_MAX,
            "description": "Each entry replaces that param's value; the rule must have the param.",
        },
        "match": {
            "type": "object",
            "additionalProperties": False,
            "description": "Each field given replaces the rule's field of the same name.",
            "properties": {
                "namespaces": _NAMESPACES,
                "namespaceSelector": _LABEL_SELECTOR,
                "objectSelector": _LABEL_SELECTOR,
            },
        },
    },
}
OVERLAY_SCHEMA: dict[str, Any] = _document(
    OVERLAY_KIND,
    {
        "type": "object",
        "additionalProperties": False,
        "required": ["rules"],
        "properties": {"rules": {"type": "array", "minItems": 1, "maxItems": RULE_ITEMS_MAX, "items": _OVERLAY_RULE}},
    },
    file="gpupolicyoverlay.json",
    description="Site changes to rules of the pack, applied before the rules are compiled: a rule turned "
    "off, its action or failurePolicy set, its params or match fields replaced. Cluster-scoped.",
)
EXCEPTION_SCHEMA: dict[str, Any] = _document(
    EXCEPTION_KIND,
    {
        "type": "object",
        "additionalProperties": False,
        "required": ["rules", "reason"],
        "properties": {
            "rules": {
                "type": "array",
                "minItems": 1,
                "maxItems": EXCEPTION_RULES_MAX,
                "items": _RULE_NAME,
                "description": "The GPUPolicies (metadata.name) the objects are excepted from.",
            },
            "match": {
                "type": "object",
                "additionalProperties": False,
                "description": "Which objects of the namespace: every field given must match (none: all).",
                "properties": {
                    "kinds": {
                        **_strings(KIND_MAX),
                        "description": "The object's kind (Deployment, Pod, ...); any if absent.",
                    },
                    "names": {**_STRINGS, "description": "The object's metadata.name; any if absent."},
                    "objectSelector": {
                        **_LABEL_SELECTOR,
                        "description": "On the object's own labels (for a workload, the workload's, not "
                        "its pod template's).",
                    },
                },
            },
            "expires": {
                "type": "string",
                "format": "date-time",
                "maxLength": 64,
                "description": "RFC 3339 time (2026-12-01T00:00:00Z) from which the exception no longer applies.",
            },
            "reason": {
                "type": "string",
                "minLength": 1,
                "maxLength": TEXT_MAX,
                "description": "Why: reported with every use.",
            },
        },
    },
    file="gpupolicyexception.json",
    description="Lets objects of its own namespace through the rules it names, until it expires. Namespaced: "
    "who may create one is RBAC's business (docs/day-two.md).",
    metadata={
        "type": "object",
        "required": ["name", "namespace"],
        "properties": {
            **_METADATA_FIELDS,
            "namespace": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": NAMESPACE_MAX},
        },
    },
)

# Expected outcome of one rule on one test case (`gpu-webhook test`).
RULE_RESULTS = ["allowed", "denied", "warned", "audited", "mutated", "skipped", "error", "excepted"]
_OBJECT_OR_FILE = {"type": ["object", "null"]}
_EXPECT_RULE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["rule"],
    "properties": {
        "rule": {"type": "string", "description": "The GPUPolicy's metadata.name."},
        "result": {
            "enum": RULE_RESULTS,
            "description": "allowed: matched and let the object through; denied/warned/audited: a violation "
            "with that action; mutated: the rule changed the object; skipped: no target matched; "
            "error: the rule could not be evaluated; excepted: a GPUPolicyException let the object through.",
        },
        "message": {"type": "string", "description": "A substring of the rule's message."},
        "messageRegex": {"type": "string", "description": "A regular expression searched in the message."},
        "patch": {"type": "array", "items": {"type": "object"}, "description": "This rule's exact JSON Patch."},
        "patchContains": {
            "type": "array",
            "items": {"type": "object"},
            "description": "Operations this rule's JSON Patch contains, among others: each is matched by an "
            "operation that contains it (fields, list items in any order), an add of a list or map counting as "
            "the adds of its items (path/-) or entries, so the expectation survives other rules joining the pack.",
        },
    },
}
TEST_SCHEMA: dict[str, Any] = _document(
    TEST_KIND,
    {
        "type": "object",
        "additionalProperties": False,
        "required": ["cases"],
        "properties": {
            "rules": {
                "type": "string",
                "description": "Rules to test (file or directory), relative to this file. "
                "Default: the rules of the directory given to `gpu-webhook test`.",
            },
            "cases": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name"],
                    "oneOf": [{"required": ["object"]}, {"required": ["objectFile"]}],
                    "properties": {
                        "name": {"type": "string"},
                        "operation": {"enum": ["CREATE", "UPDATE", "DELETE", "CONNECT"], "default": "CREATE"},
                        "object": _OBJECT_OR_FILE,
                        "objectFile": {"type": "string", "description": "YAML file, relative to this file."},
                        "oldObject": _OBJECT_OR_FILE,
                        "oldObjectFile": {"type": "string"},
                        "namespace": {"type": "string", "description": "Default: the object's namespace."},
                        "namespaceObject": _OBJECT_OR_FILE,
                        "namespaceObjectFile": {"type": "string"},
                        "clusterObjects": {
                            "type": "array",
                            "items": {"type": "object"},
                            "description": "Cluster context: PriorityClass, ResourceClaim and "
                            "ResourceClaimTemplate objects (the latter of the case's namespace), and "
                            "GPUPolicyException objects (applied as the server applies the cluster's).",
                        },
                        "userInfo": {
                            "type": "object",
                            "description": "request.userInfo: username, uid, groups, extra.",
                        },
                        "now": {
                            "type": "string",
                            "format": "date-time",
                            "description": "The time the case runs at (RFC 3339), for GPUPolicyExceptions' "
                            "spec.expires. Default: the current time.",
                        },
                        "expect": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "allowed": {"type": "boolean", "description": "The whole pack's verdict."},
                                "rules": {"type": "array", "items": _EXPECT_RULE},
                                "object": {
                                    "type": "object",
                                    "description": "The object after every mutation (a subset by default).",
                                },
                                "objectMatch": {
                                    "enum": ["subset", "exact", "contains"],
                                    "default": "subset",
                                    "description": "subset: the expected fields, lists item by item (same "
                                    "length); exact: equal; contains: the expected fields, and each expected "
                                    "list item contained in some item of the actual list (others may sit "
                                    "beside it).",
                                },
                                "patch": {
                                    "type": "array",
                                    "items": {"type": "object"},
                                    "description": "The exact JSON Patch of the whole pack.",
                                },
                                "patchContains": {
                                    "type": "array",
                                    "items": {"type": "object"},
                                    "description": "Operations the pack's JSON Patch contains, among others.",
                                },
                            },
                        },
                    },
                },
            },
        },
    },
    file="gpupolicytest.json",
)

SCHEMAS: dict[str, dict[str, Any]] = {
    POLICY_KIND: POLICY_SCHEMA,
    TEST_KIND: TEST_SCHEMA,
    CONFIG_KIND: CONFIG_SCHEMA,
    OVERLAY_KIND: OVERLAY_SCHEMA,
    EXCEPTION_KIND: EXCEPTION_SCHEMA,
}


def selector_of(spec: Mapping[str, Any] | None) -> LabelSelector | None:
    """A schema-checked LabelSelector mapping -> LabelSelector; None when absent or empty (selects all)."""
    if not spec:
        return None
    return LabelSelector(
        match_labels=tuple((spec.get("matchLabels") or {}).items()),
        match_expressions=tuple(
            (e["key"], e["operator"], frozenset(e.get("values") or ())) for e in spec.get("matchExpressions") or ()
        ),
    )


def dotted(path: Iterable[Any]) -> str:
    """A document path as authors write it: spec.mutate[0].setLabels."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
