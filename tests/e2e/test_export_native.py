"""`gpu-webhook manifests --native` on a real kube-apiserver: every object it renders is accepted, and
the native policies decide as the engine does.

The round-2 proofs (OpenAPI schemas, the CEL simulator of tests/export) passed three
MutatingAdmissionPolicies that kube-apiserver v1.36.2 refused at create time ("must evaluate to
list(JSONPatch) but got list(dyn)"). Here the apiserver is the judge (DESIGN.md section 9):

- every object `manifests --native` renders, in both `--claims` modes, is created (the webhook
  configurations by a server-side dry run: no webhook runs behind them here, and the policies alone
  must decide); `--kubernetes-version 1.36` renders what the default does;
- the releases before 1.36 (MutatingAdmissionPolicy v1alpha1 / v1beta1): every object `export`
  writes for them is dry-run created on the same binary emulating that release
  (`--emulated-version`, 1.33-1.35, with the API version enabled by `--runtime-config`); 1.30-1.32
  go to the emulated 1.33 (the oldest release this binary emulates). Emulation checks the schema and
  the CEL environment of that release; the admission plugin of MutatingAdmissionPolicy watches v1
  only, so enforcement is proven on 1.36 alone;
- verdicts: with the policies installed and no webhook, every case of the pack's suites (CREATEs,
  UPDATEs of an old object stored before the policies, kubectl debug through
  pods/ephemeralcontainers), and each Pod case wrapped into every workload kind (the pod-template
  paths), is sent as a server-side dry run in a namespace labelled as the suite says. The reference
  is the engine with a rule set of just the exported rules (the rules the webhook keeps are not in
  play), on the request as sent, without claim context, as the user the requests are made as; and
  what the apiserver does with the engine's result when no policy exists (phase 1: the engine's
  patched object sent as a dry run before the policies are installed). Compared: allowed or denied,
  the denying rule and its messages (as word sets: CEL leaves a map's key order unspecified), the
  warnings of Warn rules, and the whole object the apiserver would store (uids and generated names
  aside). So whatever the apiserver itself adds or refuses (defaulting, a Job's immutable template,
  the fields a subresource keeps) is the same on both sides, and only the policies can differ.

Each claims mode gets its own apiserver: the policies are cluster-wide and share their names across
modes, and the session's apiserver has webhooks installed that would decide too.
"""

from __future__ import annotations

import copy
import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.e2e.conftest import BUILT_IN_GROUPS, CLUSTER_FLAGS, E2E_IMAGE, gpu_webhook, workload_crd
from tests.export.equivalence import NAME_LABEL, debug_cases, suite_cases, wrap
from tests.export.native_site import NO_ALLOCATORS, not_exceptable, overlay_text
from tests.export.test_celenv import APISERVER_VERDICTS, ESCAPE_KEY, JP
from tests.support import RULES
from tests.support.envtest import ADMIN_GROUP, ADMIN_USER, EnvTest, Response, skip_reason
from webhook.engine import AdmissionInput, Decision, Limits, Phase, RuleSet, evaluate, load_rules
from webhook.engine.workloads import KINDS
from webhook.export import CLAIMS_MODES, Release, export
from webhook.export.merge import rules_of
from webhook.export.versions import DEFAULT_VERSION

MODES = CLAIMS_MODES  # refuse (the default), unresolved
POLICY_KINDS = (
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
)
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
# the user every request is made as (the token file's): what `request.userInfo` holds for the policies
ADMIN_INFO = {"username": ADMIN_USER, "uid": ADMIN_USER, "groups": [ADMIN_GROUP, "system:authenticated"]}
# every Pod case again as each of these (tests/export/equivalence.wrap), made valid for the apiserver
WRAPPED = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "JobSet", "PyTorchJob",
           "RayJob", "LeaderWorkerSet")  # fmt: skip
# a ValidatingAdmissionPolicy's denial; a policy's evaluation error under failurePolicy Fail (a
# MutatingAdmissionPolicy's: "policy 'p' with binding 'b' denied request: expression '...' resulted in error")
DENIAL = re.compile(
    r"(?:ValidatingAdmissionPolicy|policy) '(?P<policy>[^']+)' with binding '[^']*' denied request: (?P<message>.*)",
    re.DOTALL,
)
WARNING = re.compile(
    r"Validation failed for ValidatingAdmissionPolicy '(?P<policy>[^']+)' with binding '[^']*': (?P<message>.*)",
    re.DOTALL,
)
POLICY_PREFIX = "gpu-webhook-"
# a merged ValidatingAdmissionPolicy's message names its rule as the webhook's denial does (merge.py)
NAMED = re.compile(r"\[(?P<rule>[^\]]+)\] (?P<message>.*)", re.DOTALL)
# the releases before 1.36 and where they are checked: the emulated release and the API versions it serves
OLDER = {
    "1.33": ("1.30", "1.31", "1.32", "1.33"),
    "1.34": ("1.34",),
    "1.35": ("1.35",),
}


def native_site(certs: Path) -> Path:
    """A site's rules beside the pack: the GPUPolicyOverlay that makes every rule not exceptable, so
    each rule that translates exports (a rule exceptions may lift stays with the webhook:
    webhook.export.EXCEPTABLE; tests/e2e/test_exceptions_native.py proves that part), and no
    annotation-marked GPU allocator (whose shares the native count cannot see)."""
    site = certs.parent / "native-site"
    if not site.is_dir():
        site.mkdir()
        (site / "native.yaml").write_text(overlay_text(rule.name for rule in load_rules(RULES).require().rules))
        (site / "no-allocators.yaml").write_text(NO_ALLOCATORS)
    return site


def rendered(certs: Path, claims: str, version: str | None = None) -> list[dict[str, Any]]:
    """The documents `gpu-webhook manifests --native` prints for the pack and `native_site`."""
    args = ["manifests", "--ca", str(certs), "--rules", str(RULES), "--rules", str(native_site(certs))]
    args += ["--image", E2E_IMAGE, "--native"]
    args += ["--claims", claims, *(["--kubernetes-version", version] if version else [])]
    return [d for d in yaml.safe_load_all(gpu_webhook(*args).stdout) if d]


# -- the cases ------------------------------------------------------------------------------------


def valid(obj: dict[str, Any]) -> dict[str, Any]:
    """The object with what the apiserver's validation requires of its kind and a suite leaves out
    (workload selectors matching their template's labels, a Job's restartPolicy): the engine and the
    policies get the same object, so nothing is lost by completing it."""
    obj = copy.deepcopy(obj)
    kind, spec = obj.get("kind"), obj.get("spec")
    if not isinstance(spec, dict):
        return obj
    name = (obj.get("metadata") or {}).get("name") or "e2e"
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet") and isinstance(spec.get("template"), dict):
        labels = spec["template"].setdefault("metadata", {}).setdefault("labels", {})
        if not (spec.get("selector") or {}).get("matchLabels"):
            labels.setdefault("e2e-app", name)
            spec["selector"] = {"matchLabels": {"e2e-app": labels["e2e-app"]}}
        if kind == "StatefulSet":
            spec.setdefault("serviceName", name)
    jobs = [spec] if kind == "Job" else [(spec.get("jobTemplate") or {}).get("spec")] if kind == "CronJob" else []
    for job in jobs:
        pod = ((job or {}).get("template") or {}).get("spec")
        if isinstance(pod, dict) and pod.get("restartPolicy") not in ("Never", "OnFailure"):
            pod["restartPolicy"] = "Never"
    return obj


@dataclass
class Case:
    """One request of a suite case, as it is sent here."""

    name: str
    operation: str  # CREATE | UPDATE
    obj: dict[str, Any]  # as sent: valid(); an UPDATE's is the stored old object with the case's change
    namespace: str
    sub_resource: str = ""  # ephemeralcontainers: kubectl debug
    old: dict[str, Any] | None = None  # an UPDATE's old object as stored (created before any policy)
    decision: Decision | None = None  # the engine's, with the exported rules alone
    # phase 1, before any policy: what the apiserver does with the engine's result (its patched object,
    # or the request as sent); None when the old object of an UPDATE could not be stored
    expected: Response | None = None

    def send(self, api: EnvTest, obj: dict[str, Any] | None = None) -> Response:
        """A server-side dry run of the request (with `obj` in place of the object)."""
        obj = self.obj if obj is None else obj
        if self.operation == "CREATE":
            return api.dry_run_create(obj)
        path = f"{api.resource_path(self.obj['apiVersion'], self.obj['kind'], self.namespace)}/{self.obj['metadata']['name']}"
        return api.request("PUT", path + (f"/{self.sub_resource}" if self.sub_resource else ""), obj, {"dryRun": "All"})

    def admission(self, namespace: dict[str, Any]) -> AdmissionInput:
        """The request as the engine gets it: the stored Namespace, the user the requests are made as, no
        claim context (resource_claims None: the policies cannot read claims either)."""
        return AdmissionInput.offline(
            self.obj,
            operation=self.operation,
            old_object=self.old,
            namespace=self.namespace,
            namespace_object=namespace,
            user_info=ADMIN_INFO,
            dry_run=True,
            sub_resource=self.sub_resource,
        )


def suite_requests() -> Iterator[tuple[str, AdmissionInput]]:
    """Every case of the suites (CREATE, UPDATE, kubectl debug), and each Pod case as every kind of WRAPPED."""
    found = list(suite_cases())
    yield from found
    for name, admission in found:
        pod, old = admission.object, admission.old_object
        if not isinstance(pod, dict) or pod.get("kind") != "Pod" or admission.sub_resource:
            continue
        for kind in WRAPPED:
            yield (
                f"{name} [as {kind}]",
                replace(
                    admission,
                    object=wrap(pod, kind),
                    old_object=wrap(old, kind) if isinstance(old, dict) else None,
                    kind=None,
                ),
            )
    yield from debug_cases(found)


def _definition(namespace_object: dict[str, Any] | None) -> str:
    metadata = (namespace_object or {}).get("metadata") or {}
    labels = {k: v for k, v in (metadata.get("labels") or {}).items() if k != NAME_LABEL}
    return json.dumps([labels, metadata.get("annotations") or {}], sort_keys=True)


def _walk(node: Any, key: str) -> Iterator[Any]:
    if isinstance(node, dict):
        if key in node:
            yield node[key]
        for value in node.values():
            yield from _walk(value, key)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value, key)


@dataclass
class Cluster:
    """One apiserver with the suites' namespaces, the workload CRDs and one claims mode's policies."""

    api: EnvTest
    claims: str
    rules: RuleSet  # the exported rules (what the engine decides with)
    cases: list[Case] = field(default_factory=list)
    unsendable: list[str] = field(default_factory=list)  # UPDATEs whose old object the apiserver refuses
    namespaces: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> stored Namespace
    created: list[tuple[str, Response]] = field(default_factory=list)  # (Kind/name, answer) of every object
    same_as_default: bool = False  # whether --kubernetes-version 1.36 renders what the default does
    owners: dict[str, str] = field(default_factory=dict)  # a validation's expression -> its rule
    documents: list[dict[str, Any]] = field(default_factory=list)  # what `manifests --native` rendered
    setup_seconds: dict[str, float] = field(default_factory=dict)

    def prepare(self) -> None:
        """CRDs for the job kinds, the RuntimeClasses and PriorityClasses the cases name, their namespaces,
        the old objects of UPDATEs (stored), and phase 1: every request dry-run before any policy exists."""
        began = time.monotonic()
        crds = [workload_crd(kind) for kind in KINDS if kind.group not in BUILT_IN_GROUPS]
        for body in crds:
            assert self.api.create(body).ok
        every = list(suite_requests())
        objects = [a.object for _, a in every] + [a.old_object for _, a in every]
        for name in sorted({n for o in objects for n in _walk(o, "runtimeClassName") if isinstance(n, str)}):
            body = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": name}
            assert self.api.create(body).ok
        classes = {n for o in objects for n in _walk(o, "priorityClassName") if isinstance(n, str) and n}
        for name in sorted(classes - {"system-node-critical", "system-cluster-critical"}):
            body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
            assert self.api.create({**body, "value": 1000}).ok
        self._wait_for_crds(crds)
        # a namespace name the suites define twice (other labels) gets a second name for the second
        assigned: dict[tuple[str, str], str] = {}
        for index, (name, admission) in enumerate(every):
            original = admission.namespace or "default"
            key = (original, _definition(admission.namespace_object))
            if key not in assigned:
                taken = sum(1 for o, _ in assigned if o == original)
                assigned[key] = original if taken == 0 else f"{original}-v{taken + 1}"
                self._namespace(assigned[key], admission.namespace_object)
            namespace = assigned[key]
            obj = valid(admission.object or {})
            obj.setdefault("metadata", {})["namespace"] = namespace
            if admission.operation == "CREATE":
                self.cases.append(Case(name, "CREATE", obj, namespace))
                continue
            if admission.operation != "UPDATE" or not isinstance(admission.old_object, dict):
                continue
            # stored under a name of its own, before any policy: an object admitted before the rules
            old = valid(admission.old_object)
            unique = f"{str(old['metadata'].get('name') or 'e2e')[:40]}-u{index}"
            old["metadata"].update(namespace=namespace, name=unique)
            obj["metadata"]["name"] = unique
            stored = self.api.create(old)
            if not stored.ok:  # an old object the apiserver refuses (kubectl debug of an invalid pod's case)
                self.unsendable.append(f"{name}: {stored.status} {stored.message}")
                continue
            # the update a client makes: the stored object with the case's change (kubectl edit, label, debug)
            sent = jsonpatch.make_patch(old, obj).apply(copy.deepcopy(stored.body))
            sent["metadata"]["resourceVersion"] = stored.body["metadata"]["resourceVersion"]
            self.cases.append(Case(name, "UPDATE", sent, namespace, admission.sub_resource, stored.body))
        for case in self.cases:
            admission = case.admission(self.namespaces[case.namespace])
            case.decision = evaluate(self.rules, admission, Phase.ALL, limits=Limits(time_budget=None))
            mutated = case.decision.mutated if case.decision.allowed else None
            case.expected = case.send(self.api, mutated)
        self.setup_seconds["cases without policies"] = time.monotonic() - began

    def _namespace(self, name: str, namespace_object: dict[str, Any] | None) -> None:
        metadata = (namespace_object or {}).get("metadata") or {}
        labels = {**(metadata.get("labels") or {}), NAME_LABEL: name}
        annotations = dict(metadata.get("annotations") or {})
        current = self.api.request("GET", f"/api/v1/namespaces/{name}")
        if current.status == 404:
            self.namespaces[name] = self.api.create_namespace(name, labels, annotations)
            return
        # default, kube-system: there from the start; the suite's labels replace theirs
        stored = current.body
        stored["metadata"]["labels"], stored["metadata"]["annotations"] = labels, annotations
        answer = self.api.request("PUT", f"/api/v1/namespaces/{name}", stored)
        assert answer.ok, answer.message
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}}
        made = self.api.create(account)
        assert made.ok or made.status == 409, made.message
        self.namespaces[name] = answer.body

    def _wait_for_crds(self, crds: list[dict[str, Any]]) -> None:
        deadline = time.monotonic() + 30
        for body in crds:
            path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{body['metadata']['name']}"
            while True:
                conditions = (self.api.request("GET", path).body or {}).get("status", {}).get("conditions", [])
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    break
                assert time.monotonic() < deadline, f"CRD {body['metadata']['name']} not Established: {conditions}"
                time.sleep(0.1)

    def install(self, documents: list[dict[str, Any]]) -> None:
        """Create every rendered object in order, as `kubectl apply -f` would; the webhook
        configurations by dry run (no webhook runs behind them, and the policies alone decide here)."""
        began = time.monotonic()
        self.documents = documents
        for document in documents:
            if document["kind"] == "ValidatingAdmissionPolicy":  # one validation per rule, in order
                validations, rules = document["spec"]["validations"], rules_of(document)
                assert len(validations) == len(rules), document["metadata"]["name"]
                self.owners.update((v["expression"], rule) for v, rule in zip(validations, rules, strict=True))
        for document in documents:
            kind, name = document["kind"], document["metadata"]["name"]
            answer = self.api.create(document, dry_run=kind in WEBHOOK_KINDS)
            if kind == "Namespace" and answer.status == 409:
                continue
            self.created.append((f"{kind}/{name}", answer))
        self.setup_seconds["install"] = time.monotonic() - began

    @property
    def policies(self) -> list[str]:
        return [n for n, a in self.created if n.split("/")[0] in POLICY_KINDS[::2] and a.ok]


# -- the comparison -------------------------------------------------------------------------------

VOLATILE = ("uid", "creationTimestamp", "resourceVersion", "generation", "managedFields")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def normalized(obj: Any) -> Any:
    """The object without what differs between two creates of the same object: uid, timestamps, the
    uids a Job's selector and labels carry, the random suffix of the service account token volume."""
    obj = copy.deepcopy(obj)
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    if isinstance(metadata, dict):
        for key in VOLATILE:
            metadata.pop(key, None)
    text = UUID.sub("<uid>", json.dumps(obj, sort_keys=True))
    return json.loads(re.sub(r"kube-api-access-[a-z0-9]{5}", "kube-api-access-<x>", text))


def words(messages: list[str]) -> tuple[str, ...]:
    """A message's words (CEL leaves a map's key order unspecified, so listed names may come in another order)."""
    return tuple(sorted({w.strip(",;") for m in messages for w in m.split()}))


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    denials: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (rule, words of its messages) of each denying rule
    warnings: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __str__(self) -> str:
        if self.allowed:
            return "allowed" + (f", warnings {dict(self.warnings)}" if self.warnings else "")
        return f"denied by {dict(self.denials)}"


def _by_rule(pairs: list[tuple[str, str]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    grouped: dict[str, list[str]] = {}
    for rule, message in pairs:
        grouped.setdefault(rule, []).append(message)
    return tuple(sorted((rule, words(found)) for rule, found in grouped.items()))


def engine_verdict(decision: Decision) -> Verdict:
    if not decision.allowed:
        return Verdict(False, _by_rule([(v.rule, v.message) for v in decision.violations]))
    return Verdict(True, (), _by_rule([(v.rule, v.message) for v in decision.warnings]))


def attributed(policy: str, message: str, owners: dict[str, str]) -> tuple[str, str]:
    """(rule, message) of a policy's message: the rule it names, or whose validation erred, or the
    policy's own (a MutatingAdmissionPolicy is one rule's)."""
    named = NAMED.match(message)
    if named:
        return named["rule"], named["message"]
    erred = re.match(r"expression '(?P<expression>.*)' resulted in error", message, re.DOTALL)
    if erred and erred["expression"] in owners:
        return owners[erred["expression"]], message
    return policy.removeprefix(POLICY_PREFIX), message


def native_verdict(answer: Response, owners: dict[str, str]) -> Verdict:
    """The apiserver's answer: its first denying policy (it stops there), or the warnings of Warn policies."""
    warnings = [
        attributed(found["policy"], found["message"], owners)
        for found in (WARNING.match(text) for text in answer.warnings)
        if found
    ]
    if answer.ok:
        return Verdict(True, (), _by_rule(warnings))
    found = DENIAL.search(answer.message)
    if found is None:
        return Verdict(False, (("(not a policy)", (f"{answer.status} {answer.message}",)),))
    return Verdict(False, _by_rule([attributed(found["policy"], found["message"], owners)]))


def refusal(answer: Response) -> str:
    return f"{answer.status} {UUID.sub('<uid>', answer.message)}"


def differences(case: Case, answer: Response, owners: dict[str, str], tolerated: set[str] | None = None) -> list[str]:
    """What differs between the reference (the engine, and phase 1's answer to its result) and the
    apiserver's answer with the policies, in words (empty: they agree)."""
    assert case.decision is not None and case.expected is not None
    engine, native = engine_verdict(case.decision), native_verdict(answer, owners)
    expected = case.expected
    if not engine.allowed:
        if answer.ok:
            return [f"engine: {engine}; apiserver: admitted"]
        if native.denials[0][0] == "(not a policy)":
            # validation runs before the validating policies: an object the apiserver refuses by itself
            # never reaches them
            same = not expected.ok and refusal(expected) == refusal(answer)
            return [] if same else [f"engine: {engine}; apiserver: {refusal(answer)}"]
        # the apiserver names the first denying policy only: one of the engine's, with its messages
        ((rule, message),) = native.denials
        erred = {error.rule for error in case.decision.errors}  # an error's text is the runtime's, not comparable
        if rule not in dict(engine.denials) or (rule not in erred and dict(engine.denials)[rule] != message):
            return [f"engine: {engine}; apiserver: {native}"]
        return []
    if not expected.ok:  # the apiserver refuses the engine's result by itself (e.g. a Job's template is immutable)
        same = not answer.ok and refusal(expected) == refusal(answer)
        return [] if same else [f"without policies the engine's result gets {refusal(expected)}; with them: {native}"]
    if not answer.ok:
        return [f"engine: {engine}; apiserver: {native}"]
    found = [] if engine.warnings == native.warnings else [f"warnings: engine {engine}; apiserver {native}"]
    want, got = normalized(expected.body), normalized(answer.body)
    changes = list(jsonpatch.make_patch(want, got))  # the engine's result -> the policies'
    copied = [op for op in changes if job_label_copy(case, op, want, got)]
    if copied and tolerated is not None:
        tolerated.add(case.name)
    found += [f"stored object: {op}" for op in changes if op not in copied]
    return found


def job_label_copy(case: Case, change: dict[str, Any], want: dict[str, Any], stored: dict[str, Any]) -> bool:
    """A label of the pod template that a Job created without labels of its own takes, or not,
    depending on when defaulting sees it.

    batch/v1 defaulting gives a Job without labels its template's labels (the same map, so the
    selector labels the Job strategy adds to the template later appear on the Job too). The
    engine's patch lands in one piece (as a webhook's does) and the Job takes every template label;
    the apiserver applies the policies' mutations one at a time and defaults after each, so the Job
    takes the template's labels of that moment, or none when its labels were set first.
    docs/native.md says so. Only Job-level labels that equal the template's label are tolerated."""
    if case.operation != "CREATE" or case.obj.get("kind") != "Job" or case.obj["metadata"].get("labels"):
        return False
    if not change["path"].startswith("/metadata/labels/"):
        return False
    key = change["path"].removeprefix("/metadata/labels/").replace("~1", "/").replace("~0", "~")
    if change["op"] == "add":  # the policies' Job took a template label the engine's did not
        template = ((stored["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
        return template.get(key) == change.get("value")
    if change["op"] == "remove":  # the engine's Job took a template label the policies' did not
        template = ((want["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
        labels = want["metadata"].get("labels") or {}
        return key in template and template.get(key) == labels.get(key)
    return False


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=MODES)
def native(request: pytest.FixtureRequest, webhook_certs: Path) -> Iterator[Cluster]:
    """An apiserver of its own per --claims mode: prepared (phase 1), then with everything `manifests
    --native` renders."""
    if (reason := skip_reason()) is not None:
        pytest.skip(reason)
    claims = request.param
    with EnvTest.start(apiserver_args=CLUSTER_FLAGS) as api:
        cluster = Cluster(api, claims, exported_rules(claims, native_site(webhook_certs)))
        cluster.setup_seconds["apiserver"] = api.startup_seconds
        cluster.prepare()
        documents = rendered(webhook_certs, claims)
        cluster.same_as_default = documents == rendered(webhook_certs, claims, "1.36")
        cluster.install(documents)
        yield cluster


def exported_rules(claims: str, site: Path) -> RuleSet:
    """The rules `manifests --native` moves into the apiserver (exported in full), as a rule set of their own."""
    pack = load_rules([RULES, site]).require()
    names = {r.rule for r in export(pack, "all", Release.parse(DEFAULT_VERSION), claims).rules if r.note is None}
    return RuleSet.build([rule for rule in pack.rules if rule.name in names], pack.env)


# -- the tests ------------------------------------------------------------------------------------


def test_every_object_manifests_native_renders_is_created(native: Cluster) -> None:
    refused = [f"{name}: {answer.status} {answer.message}" for name, answer in native.created if not answer.ok]
    assert not refused, "\n".join(refused)
    kinds = Counter(name.split("/")[0] for name, _ in native.created)
    assert kinds["ValidatingAdmissionPolicy"] == kinds["ValidatingAdmissionPolicyBinding"] > 0
    assert kinds["MutatingAdmissionPolicy"] == kinds["MutatingAdmissionPolicyBinding"]
    if native.claims == "unresolved":  # the three the apiserver refused before (list(dyn)), where exported
        mutating = {n.split("/")[1] for n, _ in native.created if n.startswith("MutatingAdmissionPolicy/")}
        exported = {f"gpu-webhook-{rule.name}" for rule in native.rules.rules if rule.mutations}
        assert "gpu-webhook-gpu-cost-labels" in exported
        assert (
            exported
            & {
                "gpu-webhook-gpu-cost-labels",
                "gpu-webhook-kueue-priority-class",
                "gpu-webhook-kueue-queue-name",
            }
            <= mutating
        )
    assert native.same_as_default, "--kubernetes-version 1.36 renders other objects than the default"
    print(
        f"\n--claims {native.claims}: {len(native.created)} objects created, of them {len(native.policies)} policies "
        f"({dict(kinds)}); set-up {', '.join(f'{k} {v:.1f} s' for k, v in native.setup_seconds.items())}"
    )


def test_the_native_policies_decide_as_the_engine(native: Cluster) -> None:
    began = time.monotonic()

    copies: set[str] = set()  # Jobs that took a template label (job_label_copy)
    retried = 0

    def compare(batch: list[Case]) -> dict[str, list[str]]:
        found = {}
        for case in batch:
            differs = differences(case, case.send(native.api), native.owners, copies)
            if differs:
                found[case.name] = differs
        return found

    mismatches = compare(native.cases)
    # the apiserver loads policies through an informer: one created last may still be on its way
    deadline = time.monotonic() + 15
    while mismatches and time.monotonic() < deadline:
        time.sleep(1)
        retried += len(mismatches)
        mismatches = compare([c for c in native.cases if c.name in mismatches])
    elapsed = time.monotonic() - began

    decisions = [c.decision for c in native.cases if c.decision is not None]
    acting = {o.rule for d in decisions for o in d.outcomes() if o.patched or o.messages or o.blocks}
    requests = Counter(c.operation + (f" {c.sub_resource}" if c.sub_resource else "") for c in native.cases)
    by_itself = sum(1 for c in native.cases if c.expected is not None and not c.expected.ok)
    print(
        f"\n--claims {native.claims}: {len(native.cases)} requests ({dict(requests)}) compared with the engine on "
        f"{len(native.rules.rules)} exported rules: {sum(not d.allowed for d in decisions)} denied, "
        f"{sum(bool(d.allowed and d.patch) for d in decisions)} patched, "
        f"{sum(bool(d.allowed and d.warnings) for d in decisions)} warned; {by_itself} refused by the apiserver "
        f"itself; {len(native.unsendable)} UPDATEs not sent (their old object is refused); {len(copies)} Jobs took a "
        f"template label (job_label_copy); {retried} sent again while the policies loaded; {elapsed:.1f} s"
    )
    report = [f"{name}:\n  " + "\n  ".join(found[:6]) for name, found in list(mismatches.items())[:15]]
    assert not mismatches, f"{len(mismatches)} requests decided otherwise by the apiserver:\n" + "\n".join(report)
    # the comparison means something only if the cases make every exported rule act
    names = {rule.name for rule in native.rules.rules}
    assert acting == names, f"exported rules no case makes act: {sorted(names - acting)}"


def test_validating_rules_share_few_policies(native: Cluster) -> None:
    """Every exported validating rule is in exactly one merged policy, which names its rules; fewer
    policies than rules."""
    policies = [d for d in rendered_policies(native) if d["kind"] == "ValidatingAdmissionPolicy"]
    held = [rule for policy in policies for rule in rules_of(policy)]
    validating = sorted(rule.name for rule in native.rules.rules if rule.validate is not None)
    assert sorted(held) == validating
    assert len(policies) < len(validating)
    assert all(p["metadata"]["annotations"]["gpu-webhook.io/rules"] for p in policies)


def rendered_policies(native: Cluster) -> list[dict[str, Any]]:
    return [d for d in native.documents if d["kind"] in POLICY_KINDS]


def tenant_namespace(native: Cluster) -> str:
    name = "e2e-merge-tenant"
    if name not in native.namespaces:
        native.namespaces[name] = native.api.create_namespace(
            name, {"gpu-webhook.io/tenant": "true", NAME_LABEL: name}, {}
        )
    return name


def test_a_denial_names_the_rule_of_the_merged_policy(native: Cluster) -> None:
    namespace = tenant_namespace(native)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pinned", "namespace": namespace},
        "spec": {"nodeName": "gpu-node-7", "containers": [{"name": "main", "image": "busybox"}]},
    }
    answer = native.api.dry_run_create(pod)
    assert answer.status == 403 and answer.body["reason"] == "Forbidden", answer.message
    found = DENIAL.search(answer.message)
    assert found is not None, answer.message
    holder = next(d for d in rendered_policies(native) if "no-node-name-in-tenants" in rules_of(d))
    assert found["policy"] == holder["metadata"]["name"] and len(rules_of(holder)) > 1
    assert found["message"].startswith("[no-node-name-in-tenants] pod pinned sets spec.nodeName gpu-node-7")


def test_a_rule_of_a_merged_policy_judges_only_its_own_requests(native: Cluster) -> None:
    """no-node-name-in-tenants matches CREATE; the rules it shares a policy with match UPDATE too. Its
    gate keeps it out of a Deployment's UPDATE: the update that pins the template is allowed, the same
    Deployment created pinned is denied by it."""
    namespace = tenant_namespace(native)
    holder = next(d for d in rendered_policies(native) if "no-node-name-in-tenants" in rules_of(d))
    index = rules_of(holder).index("no-node-name-in-tenants")
    assert holder["spec"]["validations"][index]["expression"].startswith("!(")  # gated
    assert "UPDATE" in {op for r in holder["spec"]["matchConstraints"]["resourceRules"] for op in r["operations"]}
    labels = {"app": "e2e-gate"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "e2e-gate", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}},
        },
    }
    stored = native.api.create(deployment)
    assert stored.ok, stored.message
    pinned = copy.deepcopy(stored.body)
    pinned["spec"]["template"]["spec"]["nodeName"] = "gpu-node-7"
    path = f"{native.api.resource_path('apps/v1', 'Deployment', namespace)}/e2e-gate"
    updated = native.api.request("PUT", path, pinned, {"dryRun": "All"})
    assert updated.ok, updated.message
    assert not [w for w in updated.warnings if "no-node-name-in-tenants" in w]
    created = copy.deepcopy(deployment)
    created["metadata"]["name"] = "e2e-gate-pinned"
    created["spec"]["template"]["spec"]["nodeName"] = "gpu-node-7"
    answer = native.api.dry_run_create(created)
    found = DENIAL.search(answer.message)
    assert found is not None and found["message"].startswith("[no-node-name-in-tenants] "), answer.message


@pytest.mark.parametrize("native", ["unresolved"], indirect=True)
def test_the_type_check_of_celenv_is_the_apiservers(native: Cluster) -> None:
    """tests/export/test_celenv.py's table, re-taken: what export's own check refuses, the apiserver refuses."""
    for index, (wanted, expression, refused_as) in enumerate(APISERVER_VERDICTS):
        if wanted == "list(JSONPatch)":
            spec = {
                "matchConstraints": {"resourceRules": [RESOURCE_RULE]},
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}],
                "reinvocationPolicy": "Never",
            }
            kind, where = "MutatingAdmissionPolicy", "spec.mutations[0].jsonPatch.expression"
        else:
            field_name = "expression" if wanted == "bool" else "messageExpression"
            validation = {"expression": "true", field_name: expression}
            spec = {"matchConstraints": {"resourceRules": [RESOURCE_RULE]}, "validations": [validation]}
            kind, where = "ValidatingAdmissionPolicy", f"spec.validations[0].{field_name}"
        body = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": f"probe-{index}"}}
        answer = native.api.dry_run_create({**body, "spec": spec})
        if refused_as is None:
            assert answer.ok, f"{expression}: {answer.message}"
        else:
            assert answer.status == 422, f"{expression}: {answer.status}"
            assert where in answer.message and f"must evaluate to {wanted} but got {refused_as}" in answer.message
    # the JSONPatch library is a MutatingAdmissionPolicy's alone (celenv compiles each kind in its own environment)
    validating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "probe-escape-key"},
        "spec": {"matchConstraints": {"resourceRules": [RESOURCE_RULE]}, "validations": [{"expression": ESCAPE_KEY}]},
    }
    answer = native.api.dry_run_create(validating)
    assert answer.status == 422 and "undeclared reference to 'jsonpatch'" in answer.message, answer.message
    # and a MutatingAdmissionPolicy's mutations alone: its variables have none either
    in_variable = {"variables": [{"name": "escaped", "expression": ESCAPE_KEY}], "mutation": f"[{JP}]"}
    in_mutation = {"variables": [], "mutation": f"{ESCAPE_KEY} ? [{JP}] : []"}
    for case, accepted in ((in_variable, False), (in_mutation, True)):
        mutating = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": "probe-escape-key"},
            "spec": {
                "matchConstraints": {"resourceRules": [RESOURCE_RULE]},
                "variables": case["variables"],
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": case["mutation"]}}],
                "reinvocationPolicy": "Never",
            },
        }
        answer = native.api.dry_run_create(mutating)
        if accepted:
            assert answer.ok, answer.message
        else:
            assert answer.status == 422 and "undeclared reference to 'jsonpatch'" in answer.message, answer.message


RESOURCE_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}


@pytest.mark.parametrize("emulated", sorted(OLDER))
def test_older_releases_accept_every_object_export_writes_for_them(emulated: str) -> None:
    """For each release before 1.36, every object of `export` (both --claims modes), dry-run created
    on this kube-apiserver emulating that release with its MutatingAdmissionPolicy version enabled."""
    if (reason := skip_reason()) is not None:
        pytest.skip(reason)
    pack = not_exceptable(load_rules(RULES).require())  # as native_site makes them
    objects: dict[str, dict[str, Any]] = {}
    for version in OLDER[emulated]:
        for claims in MODES:
            for obj in export(pack, "all", Release.parse(version), claims).objects:
                objects.setdefault(json.dumps(obj, sort_keys=True), obj)
    served = Release.parse(emulated).map_version()
    flags = [f"--emulated-version={emulated}", f"--runtime-config=admissionregistration.k8s.io/{served}=true"]
    began = time.monotonic()
    with EnvTest.start(apiserver_args=flags) as api:
        started = time.monotonic() - began
        refused = []
        for obj in objects.values():
            answer = api.dry_run_create(obj)
            if not answer.ok:
                refused.append(f"{obj['apiVersion']} {obj['kind']}/{obj['metadata']['name']}: {answer.message[-400:]}")
    kinds = Counter(f"{o['kind']} {o['apiVersion'].split('/')[1]}" for o in objects.values())
    print(
        f"\nKubernetes {', '.join(OLDER[emulated])} on --emulated-version={emulated}: {len(objects)} distinct objects "
        f"({dict(kinds)}); apiserver up in {started:.1f} s, {time.monotonic() - began:.1f} s in all"
    )
    assert not refused, "\n".join(refused)


AUDIT_POLICY = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n  - level: Metadata\n"


def test_the_audit_overlay_records_what_the_enforce_overlay_denies(webhook_certs: Path, tmp_path: Path) -> None:
    """The audit roll-out step runs the webhook in `--mode=audit` (it refuses nothing); its native
    policies must not refuse either. On a real apiserver with an audit log: the enforce rendering's
    policies deny a pod that pins its node; the audit rendering's admit it and write the failure into
    the audit event (validation.policy.admission.k8s.io/validation_failure, validationActions Audit)."""
    if (reason := skip_reason()) is not None:
        pytest.skip(reason)

    def policies(overlay: str) -> list[dict[str, Any]]:
        args = ["manifests", "--ca", str(webhook_certs), "--rules", str(RULES), "--image", E2E_IMAGE, "--native"]
        args += ["--rules", str(native_site(webhook_certs))]  # no-node-name-in-tenants exported
        return [
            d
            for d in yaml.safe_load_all(gpu_webhook(*args, "--overlay", overlay).stdout)
            if d and d["kind"] in POLICY_KINDS
        ]

    enforce, audit = policies("enforce"), policies("audit")
    actions = {a for d in audit if d["kind"].endswith("Binding") for a in d["spec"].get("validationActions", [])}
    assert actions and "Deny" not in actions, actions
    (tmp_path / "audit-policy.yaml").write_text(AUDIT_POLICY)
    log = tmp_path / "audit.log"
    flags = [*CLUSTER_FLAGS, f"--audit-policy-file={tmp_path / 'audit-policy.yaml'}", f"--audit-log-path={log}"]
    with EnvTest.start(apiserver_args=flags) as api:
        api.create_namespace("e2e-rollout", {"gpu-webhook.io/tenant": "true"}, {})
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "pinned", "namespace": "e2e-rollout"},
            "spec": {"nodeName": "gpu-node-7", "containers": [{"name": "main", "image": "busybox"}]},
        }

        def answer_once_settled(want_ok: bool) -> Response:
            deadline = time.monotonic() + 30
            while True:  # the apiserver's policy informer picks new policies up within a few seconds
                answer = api.dry_run_create(pod)
                if answer.ok == want_ok or time.monotonic() > deadline:
                    return answer
                time.sleep(0.2)

        for document in enforce:
            assert api.create(document).ok
        denied = answer_once_settled(want_ok=False)
        assert denied.status == 403 and "[no-node-name-in-tenants]" in denied.message, denied.message
        for document in enforce:
            kind = document["kind"]
            path = f"{api.resource_path(document['apiVersion'], kind, None)}/{document['metadata']['name']}"
            assert api.request("DELETE", path).ok
        for document in audit:
            assert api.create(document).ok
        pod["metadata"]["name"] = "pinned-audited"
        deadline = time.monotonic() + 30
        while True:  # admitted, and recorded, once the apiserver has the audit policies in force
            admitted = api.dry_run_create(pod)
            events = [json.loads(line) for line in log.read_text().splitlines()]
            # only an Audit action writes this annotation (a Deny answers with the refusal instead)
            failures = [
                e["annotations"]["validation.policy.admission.k8s.io/validation_failure"]
                for e in events
                if "validation.policy.admission.k8s.io/validation_failure" in e.get("annotations", {})
            ]
            if admitted.ok and any("[no-node-name-in-tenants]" in f and '"Audit"' in f for f in failures):
                break
            assert time.monotonic() < deadline, f"{admitted.status} {admitted.message}; {failures}"
            time.sleep(0.2)
