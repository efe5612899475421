"""Cluster context for the engine, fed by the kubernetes client and read without I/O per request."""

from .namespaces import NamespaceCache

__all__ = ["NamespaceCache"]
