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
)


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "explain",
        help="explain the decision on one object, rule by rule",
        description="Evaluate one object as the webhook would (both phases) and show, rule by rule, whether it "
        "matched, why not, what it found and what it patched; then the decision and the mutated object. "
        "Namespace objects in FILE (or --namespace-objects) give rules their namespaceObject.",
    )
    parser.add_argument(
        "-f",
        "--file",
        required=True,
        help="the object, optionally with its Namespace and GPUPolicyExceptions (YAML or JSON; - for stdin)",
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
    ruleset = load_ruleset(rule_paths(args.rules, args.site))
    problems: list[str] = []
    namespaces = namespaces_in(args.namespace_objects, problems.append)
    if problems:
        raise UsageError("\n".join(problems))
    obj, found, context_documents = _read(args.file)
    namespaces.update(found)
    old = _read(args.old)[0] if args.old else None
    _check_namespace(obj or old, args.namespace)
    context = NamespaceContext(namespaces, args.namespace, problem=problems.append)
    for document in context_documents:  # GPUPolicyExceptions beside the object apply as in the cluster
        context.take(document)
    if problems:
        raise UsageError("\n".join(problems))
    admission = context.admission(
        obj if args.operation != "DELETE" else None,
        operation=args.operation,
        old_object=old if args.operation != "DELETE" else (old or obj),
        user_info={"username": args.user},
    )
    decision, lines = explain(ruleset, admission)
    out = console(sys.stdout, args.color)
    for line in lines:
        out.print(line)
    # the story says "not evaluated: no namespace context" rule by rule; one line says how to give it
    unevaluated = [o.rule for o in decision.outcomes() if o.reason.startswith(NO_NAMESPACE_CONTEXT)]
    if unevaluated:
        count = f"{len(unevaluated)} rule{'s' if len(unevaluated) != 1 else ''}"
        name = admission.namespace
        print(
            f"hint: {count} {NO_NAMESPACE_CONTEXT}: no Namespace object named {name!r} in the input; add it to "
            f"{_name(args.file)} or pass --namespace-objects FILE (e.g. `kubectl get ns {name} -o yaml > ns.yaml`)",
            file=sys.stderr,
        )
    return EXIT_OK if decision.allowed else EXIT_FAILED


def _name(path: str) -> str:
    """A path as messages name it, as audit names it (imported when needed: explain's start-up skips audit)."""
    from webhook.audit.sources import input_name

    return input_name(path)


def _check_namespace(obj: dict[str, Any] | None, namespace: str | None) -> None:
    """kubectl refuses an object whose namespace differs from -n; so does explain (the two would disagree)."""
    own = ((obj or {}).get("metadata") or {}).get("namespace")
    if namespace and own and own != namespace:
        raise UsageError(f"the object's namespace {own!r} does not match --namespace {namespace!r}")


# documents beside the object that are its context, not a second object
_CONTEXT_KINDS = ("Namespace", "GPUPolicyException")


def _read(path: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """The one object in the file, the Namespace objects beside it, and the GPUPolicyExceptions."""
    import yaml

    from webhook.kubeyaml import Loader

    name = _name(path)
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as stream:
                text = stream.read()
        documents = [d for d in yaml.load_all(text, Loader=Loader) if d is not None]
    except UnicodeDecodeError as error:
        raise UsageError(f"{name}: not UTF-8 text (byte {error.start}): is it a binary file?") from None
    except OSError as error:
        raise UsageError(f"{name}: {error.strerror or error}") from None
    except yaml.YAMLError as error:
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
    namespaces = {
        str(d["metadata"]["name"]): d
        for d in documents
        if d.get("kind") == "Namespace" and isinstance(d.get("metadata"), dict) and d["metadata"].get("name")
    }
    subjects = [d for d in documents if d.get("kind") not in _CONTEXT_KINDS] or documents
    if len(subjects) != 1:
        raise UsageError(
            f"{name}: expected one object (and optionally its Namespace), found {len(subjects)}: "
            "`gpu-webhook audit` reports on many"
        )
    exceptions = [d for d in documents if d.get("kind") == "GPUPolicyException" and d is not subjects[0]]
    return subjects[0], namespaces, exceptions


def _expanded(documents: list[Any]) -> list[Any]:
    """Documents with each `kind: List` replaced by its items, as audit reads them."""
    from webhook.audit.sources import list_items

    expanded: list[Any] = []
    for document in documents:
        items = list_items(document) if isinstance(document, dict) else None
        expanded.extend([document] if items is None else items)
    return expanded
