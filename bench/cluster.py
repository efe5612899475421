"""A stand-in Kubernetes API on 127.0.0.1 holding the tenant Namespace, for the server's namespace watch.

The bench's server runs with its namespace cache on, as in a cluster: `serve --namespaces watch
--kubeconfig` against the stand-in API of tests/support/kubestub.py (list and watch as the real
apiserver answers them), holding the tenant Namespace of tests/support/apiserver.py (its labels
and annotations; the stand-in writes its own short managedFields). The tenant rules then run on
every request, and the server converts the Namespace as it does in production.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.support import apiserver
from tests.support.kubestub import KubeStub


@contextlib.contextmanager
def stand_in(directory: Path, namespace: str = "team-a") -> Iterator[Path]:
    """Serve the API while the block runs; yields the kubeconfig that points at it."""
    stub = KubeStub().start()
    metadata = apiserver.namespace(namespace)["metadata"]
    stub.add(namespace, labels=metadata["labels"], annotations=metadata["annotations"])
    path = stub.kubeconfig(directory / "kubeconfig")
    try:
        yield path
    finally:
        stub.stop()
