"""JSON Schemas of the documents in a rules directory; the loader, lint and editors share them."""

from __future__ import annotations

from typing import Any

from .mutate import OPERATIONS

API_VERSION = "gpu-webhook.io/v1alpha1"
POLICY_KIND = "GPUPolicy"
CONFIG_KIND = "GPUWebhookConfig"
TEST_KIND = "GPUPolicyTest"
OPERATIONS_ENUM = ["CREATE", "UPDATE", "DELETE", "CONNECT", "*"]

_STRINGS = {"type": "array", "items": {"type": "string"}}
_LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": _STRINGS,
                },
            },
        },
    },
}
# A mutation's arguments may come whole from the rule's params, so sites configure values, not rules.
_FROM_PARAM = {
    "type": "object",
    "additionalProperties": False,
    "required": ["fromParam"],
    "properties": {"fromParam": {"type": "string"}},
}
_METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}

POLICY_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://gpu-webhook.io/schemas/gpupolicy.json",
    "title": "GPUPolicy",
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": API_VERSION},
        "kind": {"const": POLICY_KIND},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["match"],
            "anyOf": [{"required": ["validate"]}, {"required": ["mutate"]}],
            "properties": {
                "action": {"enum": ["Deny", "Warn", "Audit"], "default": "Deny"},
                "failurePolicy": {"enum": ["Fail", "Ignore"], "default": "Fail"},
                "onMissingContext": {"enum": ["Allow", "Deny"], "default": "Allow"},
                "autogen": {"type": "boolean", "default": True},
                "match": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["kinds"],
                    "properties": {
                        "kinds": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                        "operations": {"type": "array", "items": {"enum": OPERATIONS_ENUM}},
                        "namespaces": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {"include": _STRINGS, "exclude": _STRINGS},
                        },
                        "namespaceSelector": _LABEL_SELECTOR,
                        "objectSelector": _LABEL_SELECTOR,
                        "gpu": {"type": "boolean"},
                        "condition": {"type": "string"},
                    },
                },
                "validate": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["expression"],
                    "properties": {
                        "expression": {"type": "string"},
                        "message": {"type": "string"},
                        "messageExpression": {"type": "string"},
                    },
                },
                "mutate": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "minProperties": 1,
                        "maxProperties": 1,
                        "additionalProperties": False,
                        "properties": {
                            name: {"anyOf": [schema, _FROM_PARAM]} for name, (schema, _) in OPERATIONS.items()
                        },
                    },
                },
                "params": {"type": "object"},
            },
        },
    },
}

CONFIG_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": CONFIG_KIND,
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "spec"],
    "properties": {
        "apiVersion": {"const": API_VERSION},
        "kind": {"const": CONFIG_KIND},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"acceleratorResources": {"type": "array", "minItems": 1, "items": {"type": "string"}}},
        },
    },
}
