"""The HTTPS door: AdmissionReviews in, the engine's decisions out, and what keeps a replica healthy.

The face is `Server`, `ServerConfig` and `tls_context`; `commands/serve.py` wires them to the
cluster. Inside, one request goes app.py (the transport: read the body, call the pipeline, map
its answer to HTTP and metrics) -> pipeline.py (a small body here, a large one to offload.py's
child process) -> sequence.py (the one admission sequence both run: parse the review with
webhook.review's AdmissionReview v1 codec, build the input with context.py's Snapshot, evaluate,
serialise). Around it: reload.py (rules and certificate), connections.py (TLS handshakes, idle
and connection limits), metrics.py, memory.py, recorder.py,
workers.py (several processes on one port), registration_sync.py (the live webhook
configurations kept in step with the loaded rules), logs.py.
"""

from .app import RegistrationSource, Server, ServerConfig, tls_context
from .context import NamespaceSource

__all__ = ["NamespaceSource", "RegistrationSource", "Server", "ServerConfig", "tls_context"]
