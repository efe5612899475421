"""Compatibility: NamespaceCache lives in caches.py, the watch machinery in watchcache.py."""

from .caches import NamespaceCache

__all__ = ["NamespaceCache"]
