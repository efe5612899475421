"""One way to reach the cluster for every door: kubeconfig (file, $KUBECONFIG, ~/.kube/config), else in-cluster."""

from __future__ import annotations

import os

from kubernetes import client as kube_client
from kubernetes import config as kube_config


class ClusterError(Exception):
    """The API server refused or could not be reached: reported as a usage error (exit 2)."""


def connect(kubeconfig: str | None = None, context: str | None = None) -> kube_client.ApiClient:
    """An ApiClient from a kubeconfig when one is named or present, else the pod's in-cluster config."""
    in_cluster = "KUBERNETES_SERVICE_HOST" in os.environ
    default_config = os.path.expanduser(os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0])
    try:
        if kubeconfig or context or not in_cluster or os.path.exists(default_config):
            return kube_config.new_client_from_config(config_file=kubeconfig, context=context)
        configuration = kube_client.Configuration()
        kube_config.load_incluster_config(client_configuration=configuration)
        return kube_client.ApiClient(configuration)
    except (kube_config.ConfigException, OSError) as error:
        raise ClusterError(f"cannot load cluster configuration: {error}") from None
