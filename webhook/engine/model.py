"""Transitional: the names webhook/server imported from here before the engine's model was split by
direction (policy.py, request.py, decision.py). Deleted once the server imports them from
`webhook.engine`, the API; nothing else may import this module (tests/engine/test_api_boundary.py).
"""

from .request import AdmissionInput, Limits

__all__ = ["AdmissionInput", "Limits"]
