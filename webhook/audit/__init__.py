"""Dry-run audits: what the rules would deny, warn about or change, on manifests or a live cluster.

sources (files, stdin) and cluster (live API) produce objects one at a time; results runs the
engine on each and counts them per rule and namespace (Tally: audit's own; the server counts in
its metrics); formats write the reports. The `audit` command only wires these together.
"""

from .context import NamespaceContext
from .results import ObjectRef, ObjectResult, Tally, audit
from .sources import Item, SourceError, read_manifests, read_namespaces

__all__ = [
    "Item",
    "NamespaceContext",
    "ObjectRef",
    "ObjectResult",
    "SourceError",
    "Tally",
    "audit",
    "read_manifests",
    "read_namespaces",
]
