"""A whole Kubernetes cluster on 127.0.0.1 for tests: control plane, hollow GPU nodes and Kueue.

tests/support/envtest.py gives etcd and a kube-apiserver: objects are admitted and stored and
nothing acts on them. This module adds what runs workloads, from the folder `$GPU_WEBHOOK_CLUSTER`
names (the shared `cluster/` folder; its README gives the flags used here):

- kube-controller-manager v1.36.2, as `system:kube-controller-manager` with
  `--use-service-account-credentials`: each controller acts as its own ServiceAccount in
  kube-system (`system:serviceaccount:kube-system:job-controller`, `replicaset-controller`, ...),
  the users a real cluster's pods and ReplicaSets are created by, which rules judge.
- kube-scheduler v1.36.2, as `system:kube-scheduler`.
- kubemark hollow kubelets, each as `system:node:NAME` in `system:nodes` under the Node
  authorizer and NodeRestriction (`EnvTest(node_authorization=True)`): NVIDIA GPU nodes, a MIG
  node (mixed strategy), an AMD node and CPU nodes (`NODES`), with the capacity, taints and GPU
  Feature Discovery labels the real device plugins and GFD give them. Pods bound to them become
  Running with a fake runtime; nothing connects to their 192.0.2.x addresses.
- Kueue v0.13.1's manager as its ServiceAccount `kueue-system/kueue-controller-manager` (token
  from the TokenRequest API, bound to Kueue's own ClusterRole), its CRDs (server-side apply) and
  webhook configurations (the Service replaced by a 127.0.0.1 url). With internal certificate
  management off it reads a metrics certificate from the fixed path /etc/kueue/metrics/certs:
  it runs in a private mount namespace (`unshare -m`) with an overlay on /etc whose upper layer
  holds that certificate, so the machine's /etc is never written.

The binaries are .xz in the shared folder (read-only in CI); `binary()` decompresses each once
per machine into `~/.cache/gpu-webhook-cluster/<sha256 of the .xz>/` (`$XDG_CACHE_HOME` if set),
written to a temporary name and renamed, so two sessions never see half a file.

Child processes die with the test process (PR_SET_PDEATHSIG, as in envtest.py), and `stop()` ends
them in reverse order of start.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from cryptography.hazmat.primitives import serialization

from tests.support.envtest import EnvTest, EnvTestError, Response, free_port, log_tail, spawn, terminate
from webhook.certs import generate_ca, generate_serving

CLUSTER_ENV = "GPU_WEBHOOK_CLUSTER"
SKIP_REASON = f"{CLUSTER_ENV} is unset: no kube-controller-manager/kube-scheduler/kubemark/kueue to run a whole cluster"
BINARIES = ("kube-controller-manager", "kube-scheduler", "kubemark", "kueue")
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
SCHEDULER_USER = "system:kube-scheduler"
KUEUE_NAMESPACE, KUEUE_ACCOUNT = "kueue-system", "kueue-controller-manager"
KUEUE_USER = f"system:serviceaccount:{KUEUE_NAMESPACE}:{KUEUE_ACCOUNT}"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
AMD_TAINT = {"key": "amd.com/gpu", "value": "present", "effect": "NoSchedule"}
# Kueue integrations this cluster enables (Kueue's Configuration `integrations.frameworks`)
KUEUE_FRAMEWORKS = ("batch/job", "pod", "deployment", "statefulset")

T = TypeVar("T")


class ClusterError(EnvTestError):
    """A component could not be found, started, or did not become ready."""


def cluster_dir() -> Path | None:
    value = os.environ.get(CLUSTER_ENV, "").strip()
    return Path(value) if value else None


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "gpu-webhook-cluster"


def binary(source: Path, name: str) -> Path:
    """`name` decompressed from `source/name.xz` into the per-machine cache (once), executable."""
    packed = source / f"{name}.xz"
    if not packed.is_file():
        raise ClusterError(f"{CLUSTER_ENV}={source}: no {packed.name} there")
    digest = hashlib.sha256(packed.read_bytes()).hexdigest()[:16]
    target = _cache_root() / digest / name
    if os.access(target, os.X_OK):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{name}-", delete=False) as out,
        lzma.open(packed) as unpacked,
    ):
        shutil.copyfileobj(unpacked, out, 1 << 20)
    os.chmod(out.name, 0o755)
    os.replace(out.name, target)
    return target


@dataclass(frozen=True)
class NodeSpec:
    """A hollow node: its name, extended resources, labels and taints, as its kubelet registers them."""

    name: str
    resources: Mapping[str, int] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()

    def kubelet_flags(self) -> list[str]:
        flags = []
        if self.resources:
            flags.append("--extended-resources=" + ",".join(f"{k}={v}" for k, v in self.resources.items()))
        if self.labels:
            flags.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in self.labels.items()))
        if self.taints:
            flags.append(
                "--register-with-taints=" + ",".join(f"{t['key']}={t['value']}:{t['effect']}" for t in self.taints)
            )
        return flags


# GPU Feature Discovery's labels (NVIDIA/k8s-device-plugin docs/gpu-feature-discovery: gpu.product, .count,
# .memory, mig.capable, mig.strategy) and the GPU Operator's nvidia.com/gpu.present; the MIG node in the
# "mixed" strategy advertises each profile as its own resource, nvidia.com/mig-<g>g.<mem>gb.
NVIDIA_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/mig.capable": "false",
}
NODES = (
    NodeSpec("gpu-node-1", {"nvidia.com/gpu": 8}, NVIDIA_LABELS, (GPU_TAINT,)),
    NodeSpec("gpu-node-2", {"nvidia.com/gpu": 8}, NVIDIA_LABELS, (GPU_TAINT,)),
    NodeSpec(
        "mig-node-1",
        {"nvidia.com/mig-1g.10gb": 7, "nvidia.com/mig-3g.40gb": 2},
        {
            **NVIDIA_LABELS,
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
            "nvidia.com/gpu.count": "1",
            "nvidia.com/mig.capable": "true",
            "nvidia.com/mig.strategy": "mixed",
        },
        (GPU_TAINT,),
    ),
    NodeSpec(
        "amd-node-1", {"amd.com/gpu": 8}, {"amd.com/gpu.family": "AI", "amd.com/gpu.device-id": "74a1"}, (AMD_TAINT,)
    ),
    NodeSpec("cpu-node-1", {}, {"node.example.com/pool": "cpu"}),
    NodeSpec("cpu-node-2", {}, {"node.example.com/pool": "cpu"}),
)


def node_user(name: str) -> str:
    return f"system:node:{name}"


def retry(what: str, attempt: Callable[[], T | None], timeout: float, interval: float = 0.25) -> T:
    """The first non-None answer of `attempt()` within `timeout` seconds, else ClusterError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        answer = attempt()
        if answer is not None:
            return answer
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@dataclass
class Cluster:
    """A running whole cluster: `env` (the apiserver) plus the components. `Cluster.start()`; `stop()` ends all."""

    env: EnvTest
    source: Path
    directory: Path
    kueue_port: int = 0
    _processes: list[tuple[str, subprocess.Popen[bytes], Path]] = field(default_factory=list, repr=False)

    @classmethod
    def start(cls, source: Path, apiserver_args: Sequence[str] = (), nodes: Iterable[NodeSpec] = NODES) -> Cluster:
        """Start the apiserver, controller-manager, scheduler, hollow `nodes` and Kueue; return when all are ready."""
        binaries = {name: binary(source, name) for name in BINARIES}
        nodes = tuple(nodes)
        users = [
            (CONTROLLER_MANAGER_USER, ()),
            (SCHEDULER_USER, ()),
            *((node_user(n.name), ("system:nodes",)) for n in nodes),
        ]
        env = EnvTest.start(apiserver_args=apiserver_args, users=users, node_authorization=True)
        cluster = cls(env=env, source=source, directory=env.directory / "cluster")
        cluster.directory.mkdir()
        try:
            cluster._start_control_plane(binaries)
            for index, node in enumerate(nodes):
                cluster._start_node(binaries["kubemark"], node, index)
            cluster._wait_nodes_ready(nodes, timeout=90)
            cluster._start_kueue(binaries["kueue"])
        except BaseException:
            cluster.stop()
            raise
        return cluster

    # -- components ----------------------------------------------------------------------------

    def _spawn(self, name: str, args: Sequence[str | os.PathLike[str]]) -> subprocess.Popen[bytes]:
        log = self.directory / f"{name}.log"
        process = spawn(args, log)
        self._processes.append((name, process, log))
        return process

    def _start_control_plane(self, binaries: Mapping[str, Path]) -> None:
        pki = self.env.directory / "pki"
        self._spawn(
            "kube-controller-manager",
            [
                binaries["kube-controller-manager"],
                f"--kubeconfig={self.env.kubeconfig_for(CONTROLLER_MANAGER_USER)}",
                "--leader-elect=false",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=true",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--controllers=*,-nodeipam,-cloud-node-lifecycle,-route,-service",
                # a Job's pods are created within a second of its resume, not after the default backoff
                "--concurrent-job-syncs=5",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                binaries["kube-scheduler"],
                f"--kubeconfig={self.env.kubeconfig_for(SCHEDULER_USER)}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
            ],
        )

    def _start_node(self, kubemark: Path, node: NodeSpec, index: int) -> None:
        self._spawn(
            f"node-{node.name}",
            [
                kubemark,
                "--morph=kubelet",
                "--use-host-image-service=false",
                f"--name={node.name}",
                f"--kubeconfig={self.env.kubeconfig_for(node_user(node.name))}",
                f"--kubelet-port={free_port()}",
                "--kubelet-read-only-port=0",
                *node.kubelet_flags(),
            ],
        )

    def _wait_nodes_ready(self, nodes: Sequence[NodeSpec], timeout: float) -> None:
        wanted = {n.name for n in nodes}

        def ready() -> bool | None:
            self.check_running()
            listed = self.env.request("GET", "/api/v1/nodes")
            if not listed.ok:
                return None
            good = {
                n["metadata"]["name"]
                for n in listed.body["items"]
                if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
                and not any(t["key"] == "node.kubernetes.io/not-ready" for t in n["spec"].get("taints", []))
            }
            return True if wanted <= good else None

        retry(f"nodes {sorted(wanted)} Ready", ready, timeout, interval=0.5)

    def check_running(self) -> None:
        """Raise ClusterError (with its log's tail) if a component has exited."""
        for name, process, log in self._processes:
            if process.poll() is not None:
                raise ClusterError(f"{name} exited with status {process.returncode}\n{log_tail(log)}")

    # -- Kueue ---------------------------------------------------------------------------------

    def apply(self, document: Mapping[str, Any], manager: str = "cluster-test") -> Response:
        """Server-side apply of one document (forced: the test owns these objects)."""
        metadata = document["metadata"]
        path = f"{self.env.resource_path(document['apiVersion'], document['kind'], metadata.get('namespace'))}/{metadata['name']}"
        answer = self.env.request(
            "PATCH",
            path,
            document,
            {"fieldManager": manager, "force": "true"},
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        if not answer.ok:
            raise ClusterError(f"applying {document['kind']}/{metadata['name']}: {answer.status} {answer.message}")
        return answer

    def wait_established(self, name: str, timeout: float = 30) -> None:
        def established() -> bool | None:
            crd = self.env.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = ((crd.body or {}).get("status") or {}).get("conditions") or []
            return True if any(c["type"] == "Established" and c["status"] == "True" for c in conditions) else None

        retry(f"CRD {name} Established", established, timeout, interval=0.1)

    def service_account_token(self, namespace: str, name: str) -> str:
        """A token of ServiceAccount namespace/name from the TokenRequest API (created if missing)."""
        self.env.create(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}
        )
        answer = self.env.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 86400}},
        )
        if not answer.ok:
            raise ClusterError(f"TokenRequest for {namespace}/{name}: {answer.status} {answer.message}")
        return str(answer.body["status"]["token"])

    def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        path = self.directory / f"kubeconfig-{namespace}-{name}"
        if not path.exists():
            self.env.write_kubeconfig(
                path, f"system:serviceaccount:{namespace}:{name}", self.service_account_token(namespace, name)
            )
        return path

    def _start_kueue(self, kueue: Path) -> None:
        files = self.source / "kueue"
        crds = [yaml.safe_load(crd.read_text()) for crd in sorted((files / "crd").glob("*.yaml"))]
        for crd in crds:
            self.apply(crd, manager="kueue-install")
        for crd in crds:
            self.wait_established(crd["metadata"]["name"])
        namespace = self.env.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}})
        if not namespace.ok and namespace.status != 409:
            raise ClusterError(f"namespace {KUEUE_NAMESPACE}: {namespace.message}")
        role = yaml.safe_load((files / "rbac" / "role.yaml").read_text())
        role["metadata"] = {"name": "kueue-manager-role"}
        self.apply(role)
        self.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "kueue-manager-rolebinding"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "kueue-manager-role",
                },
                "subjects": [{"kind": "ServiceAccount", "name": KUEUE_ACCOUNT, "namespace": KUEUE_NAMESPACE}],
            }
        )
        kubeconfig = self.service_account_kubeconfig(KUEUE_NAMESPACE, KUEUE_ACCOUNT)
        # serving certificates: the webhook's for 127.0.0.1; the metrics one only has to exist
        ca_cert, ca_key = generate_ca("kueue test CA")
        cert, key = generate_serving(ca_cert, ca_key, ["localhost"], ["127.0.0.1"])
        pem = serialization.Encoding.PEM
        private = (serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        certs = self.directory / "kueue-webhook-certs"
        upper, work = self.directory / "etc-upper", self.directory / "etc-work"
        metrics = upper / "kueue" / "metrics" / "certs"
        for directory in (certs, metrics, work):
            directory.mkdir(parents=True)
        for where in (certs, metrics):
            (where / "tls.crt").write_bytes(cert.public_bytes(pem))
            (where / "tls.key").write_bytes(key.private_bytes(pem, *private))
            (where / "ca.crt").write_bytes(ca_cert.public_bytes(pem))
        self.kueue_port = free_port()
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta1",
            "kind": "Configuration",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{free_port()}"},
            "metrics": {"bindAddress": f"127.0.0.1:{free_port()}"},
            "webhook": {"host": "127.0.0.1", "port": self.kueue_port, "certDir": str(certs)},
            "internalCertManagement": {"enable": False},
            "leaderElection": {"leaderElect": False},
            "manageJobsWithoutQueueName": False,
            "waitForPodsReady": {"enable": False},
            "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
        }
        config_file = self.directory / "kueue-config.yaml"
        config_file.write_text(yaml.safe_dump(config))
        script = 'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc && shift 2 && exec "$@"'
        self._spawn(
            "kueue",
            [
                "unshare",
                "--mount",
                "--propagation=private",
                "sh",
                "-c",
                script,
                "sh",
                upper,
                work,
                kueue,
                f"--config={config_file}",
                f"--kubeconfig={kubeconfig}",
                "--feature-gates=VisibilityOnDemand=false",
            ],
        )
        webhooks = list(yaml.safe_load_all((files / "webhook" / "manifests.yaml").read_text()))
        for document in webhooks:
            if document:
                # the names Kueue's released manifests give them (kustomize namePrefix `kueue-`)
                document["metadata"]["name"] = "kueue-" + document["metadata"]["name"]
        self._wait_kueue_serving(ca_cert.public_bytes(pem))
        self.env.install_webhooks(webhooks, f"https://127.0.0.1:{self.kueue_port}", ca_cert.public_bytes(pem))

    def _wait_kueue_serving(self, ca_pem: bytes) -> None:
        context = ssl.create_default_context(cadata=ca_pem.decode())

        def serving() -> bool | None:
            self.check_running()
            try:
                with (
                    socket.create_connection(("127.0.0.1", self.kueue_port), timeout=2) as raw,
                    context.wrap_socket(raw, server_hostname="127.0.0.1"),
                ):
                    return True
            except OSError:
                return None

        retry("Kueue's webhook server", serving, timeout=60, interval=0.3)

    # -- life cycle ----------------------------------------------------------------------------

    def stop(self) -> None:
        try:
            for _name, process, _log in reversed(self._processes):
                terminate(process, timeout=10)
        finally:
            self._processes.clear()
            self.env.stop()

    def logs(self, name: str, lines: int = 40) -> str:
        return f"--- {name}.log (tail) ---\n{log_tail(self.directory / f'{name}.log', lines)}"

    # -- reading the cluster -------------------------------------------------------------------

    def get(self, path: str) -> dict[str, Any]:
        answer = self.env.request("GET", path)
        if not answer.ok:
            raise ClusterError(f"GET {path}: {answer.status} {answer.message}")
        return dict(answer.body)

    def items(self, path: str, **selectors: str) -> list[dict[str, Any]]:
        query = {k.replace("_", ""): v for k, v in selectors.items()}
        answer = self.env.request("GET", path, query=query or None)
        if not answer.ok:
            raise ClusterError(f"GET {path}: {answer.status} {answer.message}")
        return list(answer.body["items"])

    def events(self, namespace: str) -> list[dict[str, Any]]:
        return self.items(f"/api/v1/namespaces/{namespace}/events")


def dumps(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True)[:4000]
