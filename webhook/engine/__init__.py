"""The policy engine: a pure library. Load rules once, evaluate objects many times.

result = load_rules("rules/")
decision = evaluate(result.ruleset, AdmissionInput.offline(pod, namespace="team-a"))
for outcome in decision.outcomes(): ...

This module is the engine's face: the doors (webhook.server, audit, authoring, export, install,
kube, policies, commands, cli; bench) import from `webhook.engine` only, and the documents'
vocabulary (apiVersion, kinds, schemas) from `webhook.engine.documents`, never from the other
modules (tests/engine/test_api_boundary.py checks, and holds the face to its budget of names).
The CEL text utilities and quantities are below the engine, in `webhook.cel`.

Its modules, by what they hold: policy.py (rules in), request.py (what a door hands evaluate),
decision.py (what comes out), evaluate.py (the run), matching.py, facts.py (the working copy),
programs.py (how the CEL runs), projection.py (what the CEL is handed, per set of rules),
limits.py, ratcheting.py (ratcheting's fields), loader.py, ruleset.py, schema.py, documents.py,
policyresources.py (the CRDs' names),
workloads.py (the kind table), overlays.py (site overlays on the rule documents), exceptions.py
(GPUPolicyException), mutate.py (the mutation registry), patch.py, pointer.py, resources.py
(the accelerator table), paramtypes.py (the types of a rule's params), cel.py (the CEL runtime).
"""

from .cel import CompiledExpression
from .decision import NO_NAMESPACE_CONTEXT, SEVERITY, Decision, Result, RuleOutcome, shared_outcome
from .evaluate import evaluate
from .exceptions import PolicyException, parse_exception, parse_time
from .kueue import queue_table
from .loader import LoadResult, compile_documents, exception_errors, load_rules, rule_files
from .mutate import MUTATIONS, MutationView
from .paramtypes import ParamTypes
from .pointer import is_map
from .policy import Action, KindApi, LabelSelector, LoadError, Rule, RuleLoadError, SourceLocation
from .request import AdmissionInput, ClusterContext, ClusterSource, Limits, Mode, Phase, priority_class_table
from .resources import Accelerators
from .ruleset import RuleSet, indexed_kinds
from .workloads import KIND_TABLE, WorkloadKind

# evaluate, and what a door hands it: the admission (AdmissionInput.offline for doors without an
# AdmissionRequest, .from_request for the server's), the cluster context beyond its namespace and
# where a door reads it (ClusterContext, ClusterSource; priority_class_table for its
# PriorityClasses, queue_table for its Kueue queues), the phase, the server's mode, the limits (Limits(): the defaults)
__all__ = [
    "AdmissionInput",
    "ClusterContext",
    "ClusterSource",
    "Limits",
    "Mode",
    "Phase",
    "evaluate",
    "priority_class_table",
    "queue_table",
]
# what evaluate gives: the decision, and its summary per rule (outcomes()) that every door reports
__all__ += [
    "NO_NAMESPACE_CONTEXT",
    "SEVERITY",
    "Decision",
    "Result",
    "RuleOutcome",
    "shared_outcome",
]
# loading rules: files -> a RuleSet of Rules, or LoadErrors located in the files; the exceptions
# (RuleSet.exceptions from files, AdmissionInput/ClusterContext.exceptions from the cluster)
__all__ += [
    "LoadError",
    "LoadResult",
    "PolicyException",
    "RuleLoadError",
    "RuleSet",
    "SourceLocation",
    "compile_documents",
    "exception_errors",
    "load_rules",
    "parse_exception",
    "parse_time",
    "rule_files",
]
# what a Rule holds and what doors read of it: its action, selectors, declared kinds, CEL, the
# mutations (read as data through their view(); MUTATIONS is the registry), the kinds the rule
# set indexes it under; the accelerator table it counts with
__all__ += [
    "MUTATIONS",
    "Accelerators",
    "Action",
    "CompiledExpression",
    "KindApi",
    "LabelSelector",
    "MutationView",
    "Rule",
    "indexed_kinds",
]
# the CEL types of a rule's params, for lint; JSON documents' maps
__all__ += ["ParamTypes", "is_map"]
# the kind table: workload kinds, their API and pod templates (autogen, audit, export, registration)
__all__ += ["KIND_TABLE", "WorkloadKind"]
