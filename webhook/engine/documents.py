"""The documents' vocabulary for the doors: the apiVersion, kinds and JSON Schemas of the rule,
overlay, exception, configuration and test documents (schema.py defines them), and the policy
objects as cluster resources (policyresources.py: the CRDs' names, the bound on exceptions per
namespace).

The engine's second face, beside its `__init__`: a door imports these names from here, and
nothing else of the engine but `webhook.engine` (tests/engine/test_api_boundary.py checks).
"""

from .policyresources import MAX_EXCEPTIONS_PER_NAMESPACE, POLICY_RESOURCES, PolicyResource
from .schema import (
    API_VERSION,
    CONFIG_KIND,
    EXCEPTION_KIND,
    OVERLAY_KIND,
    POLICY_KIND,
    SCHEMAS,
    TEST_KIND,
    TEST_SCHEMA,
)

__all__ = [
    "API_VERSION",
    "CONFIG_KIND",
    "EXCEPTION_KIND",
    "MAX_EXCEPTIONS_PER_NAMESPACE",
    "OVERLAY_KIND",
    "POLICY_KIND",
    "POLICY_RESOURCES",
    "SCHEMAS",
    "TEST_KIND",
    "TEST_SCHEMA",
    "PolicyResource",
]
