"""Cluster context for the engine, fed by the kubernetes client and read without I/O per request; the
policy objects it watches as loader documents (policyobjects.py)."""

from .caches import ClusterCaches, NamespaceCache, PriorityClassCache
from .connect import ClusterError, connect
from .watchcache import WatchCache

__all__ = ["ClusterCaches", "ClusterError", "NamespaceCache", "PriorityClassCache", "WatchCache", "connect"]
