"""Requests by path through the kubernetes client's ApiClient (its auth, TLS and proxy settings).

Why not the generated typed APIs (`client.CoreV1Api(...).list_namespace`): in kubernetes 37
each of their methods is wrapped in a pydantic validator built when the class is imported, so
importing CoreV1Api alone costs 1.5-3.7 s of CPU (cold bytecode) at every start of `serve`,
and the caches and the audit read the raw JSON anyway. A path and a query are all they need.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

Query = list[tuple[str, Any]]


def send(
    api_client: ApiClient, method: str, path: str, query: Query | None = None, body: Any = None, timeout: Any = None
) -> Any:
    """The kubernetes client's RESTResponse, whatever its status (read it with `.read()`)."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    method, url, headers, body, post = api_client.param_serialize(
        method, path, query_params=query or [], header_params=headers, body=body, auth_settings=["BearerToken"]
    )
    return api_client.call_api(method, url, headers, body, post, _request_timeout=timeout)


def get(api_client: ApiClient, path: str, query: Query | None = None, *, timeout: Any) -> Any:
    """The urllib3 response of a GET (unread: a watch streams it); ApiException on any status but 2xx.

    The same contract as a typed method called with `_preload_content=False`, which the watch
    cache's retry logic relies on (410 Gone, 404 on a lookup).
    """
    response = send(api_client, "GET", path, query, timeout=timeout)
    if not 200 <= response.status <= 299:
        response.read()
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return response.response
