"""Cluster context for the engine, fed by the kubernetes client and read without I/O per request."""

from .caches import ClusterContext, NamespaceCache, PriorityClassCache
from .connect import ClusterError, connect
from .watchcache import WatchCache

__all__ = ["ClusterContext", "ClusterError", "NamespaceCache", "PriorityClassCache", "WatchCache", "connect"]
