"""Cluster context for the engine, fed by the kubernetes client and read without I/O per request."""

from .caches import ClusterCaches, NamespaceCache, PriorityClassCache
from .connect import ClusterError, connect
from .watchcache import WatchCache

__all__ = ["ClusterCaches", "ClusterError", "NamespaceCache", "PriorityClassCache", "WatchCache", "connect"]
