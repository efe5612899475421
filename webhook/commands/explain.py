"""`gpu-webhook explain -f FILE`: show which rules matched one object, why, and what they did."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from webhook.commands.common import (
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    add_namespace_objects,
    add_rules,
    load_ruleset,
    namespaces_in,
    rule_paths,
    warn,
)


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "explain",
        help="explain the decision on one object, rule by rule",
        description="Evaluate an object as the webhook would (both phases) and show, rule by rule, whether it "
        "matched, why not, what it found and what it patched; then the decision and the mutated object. "
        "Namespace objects in FILE (or --namespace-objects) give rules their namespaceObject; a List "
        "(kubectl get -o yaml) or several documents are explained object by object.",
    )
    parser.add_argument(
        "-f",
        "--file",
        required=True,
        help="the object (or a List, or several), optionally with its Namespace, GPUPolicyExceptions, "
        "PriorityClasses, RuntimeClasses and DeviceClasses as context (YAML or JSON; - for stdin)",
    )
    add_namespace_objects(parser)
    parser.add_argument("--operation", default="CREATE", choices=("CREATE", "UPDATE", "DELETE", "CONNECT"))
    parser.add_argument("--old", metavar="FILE", help="the old object (UPDATE, DELETE)")
    parser.add_argument(
        "-n",
        "--namespace",
        help="the namespace of an object that names none (as kubectl apply -n; default: default)",
    )
    parser.add_argument("--user", default="gpu-webhook-explain", help="request.userInfo.username")
    live = parser.add_argument_group("live cluster")
    live.add_argument(
        "--cluster",
        action="store_true",
        help="explain against the cluster's GPUPolicy objects and overlays, its GPUPolicyExceptions, "
        "the object's Namespace and the PriorityClasses and DRA objects, read as `audit --cluster` reads them",
    )
    live.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (default: $KUBECONFIG, in-cluster)")
    live.add_argument("--context", metavar="NAME", help="kubeconfig context")
    add_rules(parser)
    parser.add_argument("--color", action="store_true", default=None, help="colour even when not on a terminal")
    parser.add_argument("--no-color", dest="color", action="store_false", help="never colour")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from webhook.audit.context import NamespaceContext
    from webhook.authoring.explain import console, explain
    from webhook.engine import NO_NAMESPACE_CONTEXT

    if args.operation == "UPDATE" and not args.old:
        raise UsageError("--operation UPDATE needs --old FILE")
    documents = _read(args.file)
    subjects = _subjects(documents, args.file)
    if args.old and len(subjects) != 1:
        raise UsageError(f"{_name(args.file)}: --old goes with one object, found {len(subjects)}")
    old = _single(_subjects(_read(args.old), args.old), args.old) if args.old else None
    for subject in subjects:
        _check_namespace(subject, args.namespace)
    problems: list[str] = []
    if args.cluster:
        objects, cluster = _cluster(args, {_namespace_of(s, args.namespace) for s in subjects})
        ruleset = load_ruleset(rule_paths(args.rules, args.site), objects=objects)
        context = NamespaceContext(default_namespace=args.namespace, cluster=cluster, problem=problems.append)
    else:
        ruleset = load_ruleset(rule_paths(args.rules, args.site))
        namespaces = namespaces_in(args.namespace_objects, problems.append)
        context = NamespaceContext(namespaces, args.namespace, problem=problems.append)
    explained = {id(subject) for subject in subjects}
    for document in documents:  # Namespaces, GPUPolicyExceptions, PriorityClasses...: context, as in the cluster
        if id(document) not in explained or document.get("kind") in ("ResourceClaim", "ResourceClaimTemplate"):
            context.take(document)
    if problems:
        raise UsageError("\n".join(problems))
    out = console(sys.stdout, args.color)
    allowed = True
    missing: dict[str, int] = {}  # namespace without its Namespace object -> rules not evaluated there
    for index, subject in enumerate(subjects):
        admission = context.admission(
            subject if args.operation != "DELETE" else None,
            operation=args.operation,
            old_object=old if args.operation != "DELETE" else (old or subject),
            user_info={"username": args.user},
        )
        decision, lines = explain(ruleset, admission)
        if index:
            out.print()
        for text in lines:
            out.print(text)
        allowed = allowed and decision.allowed
        unevaluated = [o.rule for o in decision.outcomes() if o.reason.startswith(NO_NAMESPACE_CONTEXT)]
        if unevaluated and admission.namespace:
            missing[admission.namespace] = max(missing.get(admission.namespace, 0), len(unevaluated))
    for name, rules in missing.items():
        # the story folds "not evaluated: no namespace context"; one line says how to give it
        count = f"{rules} rule{'s' if rules != 1 else ''}"
        if args.cluster:
            fix = "let your account get that Namespace"
        else:
            fix = (
                f"add it to {_name(args.file)} or pass --namespace-objects FILE "
                f"(e.g. `kubectl get ns {name} -o yaml > ns.yaml`)"
            )
        print(
            f"hint: {count} {NO_NAMESPACE_CONTEXT}: no Namespace object named {name!r} in the input; {fix}",
            file=sys.stderr,
        )
    return EXIT_OK if allowed else EXIT_FAILED


def _cluster(args: argparse.Namespace, namespaces: set[str | None]) -> tuple[list[Any], Any]:
    """The cluster's policy objects and its context for the objects' namespace, as audit --cluster reads them."""
    from webhook.audit import cluster

    try:
        api = cluster.Api(cluster.connect(args.kubeconfig, args.context))
        objects = cluster.policy_documents(api)
        scoped = next(iter(namespaces)) if len(namespaces) == 1 else None

        def unavailable(message: str, status: int) -> None:
            if status != 404:  # not served (an older cluster) is quiet, as in audit
                warn(message)

        context = cluster.read_context(api, scoped, note=unavailable)
    except cluster.ClusterError as error:
        raise UsageError(str(error)) from None
    return objects, context


def _namespace_of(obj: dict[str, Any], given: str | None) -> str | None:
    from webhook.audit.context import NamespaceContext

    return NamespaceContext(default_namespace=given).namespace_of(obj)


def _name(path: str) -> str:
    """A path as messages name it, as audit names it (imported when needed: explain's start-up skips audit)."""
    from webhook.audit.sources import input_name

    return input_name(path)


def _check_namespace(obj: dict[str, Any] | None, namespace: str | None) -> None:
    """kubectl refuses an object whose namespace differs from -n; so does explain (the two would disagree)."""
    own = ((obj or {}).get("metadata") or {}).get("namespace")
    if namespace and own and own != namespace:
        raise UsageError(f"the object's namespace {own!r} does not match --namespace {namespace!r}")


# documents beside the objects that are their context, not objects to explain (NamespaceContext.take);
# ResourceClaims and templates are both
_CONTEXT_KINDS = ("Namespace", "GPUPolicyException", "PriorityClass", "RuntimeClass", "DeviceClass")


def _read(path: str) -> list[dict[str, Any]]:
    """The documents of the file, each `kind: List` replaced by its items (as audit reads them)."""
    from webhook.kubeyaml import ParseError, kubectl_documents

    name = _name(path)
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as stream:
                text = stream.read()
        documents = [d for d in kubectl_documents(text) if d is not None]
    except UnicodeDecodeError as error:
        raise UsageError(f"{name}: not UTF-8 text (byte {error.start}): is it a binary file?") from None
    except OSError as error:
        raise UsageError(f"{name}: {error.strerror or error}") from None
    except ParseError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        raise UsageError(f"{where}: invalid YAML: {getattr(error, 'problem', None) or error}") from None
    documents = _expanded(documents)
    if not all(isinstance(d, dict) and d.get("kind") and d.get("apiVersion") for d in documents):
        raise UsageError(f"{name}: every document must be a Kubernetes object (apiVersion and kind)")
    if len(documents) == 1 and documents[0].get("kind") == "AdmissionReview":
        request = documents[0].get("request") or {}
        if isinstance(request.get("object"), dict):
            raise UsageError(f"{name}: an AdmissionReview; explain reads the object (its request.object)")
    return documents


def _subjects(documents: list[dict[str, Any]], path: str) -> list[dict[str, Any]]:
    """The objects to explain: every document that is not context (a file of context only: each of those)."""
    found = [d for d in documents if d.get("kind") not in _CONTEXT_KINDS] or documents
    if not found:
        raise UsageError(f"{_name(path)}: no object to explain")
    return found


def _single(found: list[dict[str, Any]], path: str) -> dict[str, Any]:
    if len(found) != 1:
        raise UsageError(f"{_name(path)}: expected one old object, found {len(found)}")
    return found[0]


def _expanded(documents: list[Any]) -> list[Any]:
    """Documents with each `kind: List` replaced by its items, as audit reads them."""
    from webhook.audit.sources import list_items

    expanded: list[Any] = []
    for document in documents:
        items = list_items(document) if isinstance(document, dict) else None
        expanded.extend([document] if items is None else items)
    return expanded
