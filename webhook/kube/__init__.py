"""Cluster context for the engine, fed by the kubernetes client and read without I/O per request."""

from .connect import ClusterError, connect
from .namespaces import NamespaceCache

__all__ = ["ClusterError", "NamespaceCache", "connect"]
