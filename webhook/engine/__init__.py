"""The policy engine: a pure library. Load rules once, evaluate objects many times.

result = load_rules("rules/")
decision = evaluate(result.ruleset, AdmissionInput.offline(pod, namespace="team-a"))
for outcome in decision.outcomes(): ...

This module is the engine's API: the doors (webhook.server, audit, authoring, export, install,
kube, commands, cli; bench) import from `webhook.engine` only, never from its modules
(tests/engine/test_api_boundary.py checks). Its modules, by what they hold: policy.py (rules
in), request.py (what a door hands evaluate), decision.py (what comes out), evaluate.py (the
run), matching.py, facts.py (the working copy), programs.py (how the CEL runs), projection.py,
limits.py, ratcheting.py (ratcheting's fields), loader.py, ruleset.py, schema.py, workloads.py (the
kind table), overlays.py (site overlays on the rule documents), exceptions.py (GPUPolicyException),
mutate.py (the mutation registry), patch.py, pointer.py, resources.py, cel.py (the CEL runtime).
The CEL text utilities and quantities are below the engine, in webhook.cel.
"""

from webhook.cel import celhelpers, celsyntax
from webhook.cel.quantity import QuantityError, parse_quantity, quantity_of
from webhook.cel.results import plain_result

from .cel import CompiledExpression
from .decision import (
    NO_NAMESPACE_CONTEXT,
    SEVERITY,
    Decision,
    EvaluationError,
    Result,
    RuleOutcome,
    RuleTrace,
    Violation,
    shared_outcome,
)
from .evaluate import evaluate
from .exceptions import (
    EXCEPTION_VALIDATOR,
    PolicyException,
    exception_problems,
    parse_exception,
    parse_time,
    unknown_rules,
)
from .loader import LoadResult, compile_documents, exception_errors, load_rules, rule_files
from .mutate import (
    DNS_SUBDOMAIN,
    LABEL_VALUE,
    MUTATIONS,
    AddToleration,
    Mutation,
    MutationView,
    RequireNodeAffinity,
    SetMetadata,
    SetPodField,
    SetQueueName,
    mutation_name,
)
from .overlays import OVERLAID_BY, apply_overlays
from .paramtypes import cel_types as param_cel_types
from .paramtypes import inferred_schema as inferred_params_schema
from .paramtypes import type_error as param_type_error
from .pointer import is_map
from .policy import Action, KindApi, LabelSelector, LoadError, Rule, RuleLoadError, SourceLocation
from .ratcheting import top_level
from .request import (
    DEFAULT_LIMITS,
    AdmissionInput,
    ClusterContext,
    ClusterSource,
    Limits,
    Mode,
    Phase,
    priority_class_table,
)
from .resources import Accelerators
from .ruleset import RuleSet, indexed_kinds
from .schema import (
    API_VERSION,
    CONFIG_KIND,
    EXCEPTION_KIND,
    EXCEPTION_SCHEMA,
    OVERLAY_KIND,
    OVERLAY_SCHEMA,
    POLICY_KIND,
    POLICY_SCHEMA,
    SCHEMAS,
    TEST_KIND,
    TEST_SCHEMA,
)
from .workloads import BY_KIND, KINDS, UNMUTATED_KINDS, WORKLOAD_KINDS, WORKLOADS, WorkloadKind

# evaluate, and what a door hands it: the admission (AdmissionInput.offline for doors without an
# AdmissionRequest, .from_request for the server's), the cluster context beyond its namespace and
# where a door reads it (ClusterContext, ClusterSource), the phase, the server's mode, the limits
__all__ = [
    "DEFAULT_LIMITS",
    "AdmissionInput",
    "ClusterContext",
    "ClusterSource",
    "Limits",
    "Mode",
    "Phase",
    "evaluate",
    "priority_class_table",
]
# what evaluate gives: the decision, and its summary per rule (outcomes()) that every door reports
__all__ += [
    "NO_NAMESPACE_CONTEXT",
    "SEVERITY",
    "Decision",
    "EvaluationError",
    "Result",
    "RuleOutcome",
    "RuleTrace",
    "Violation",
    "shared_outcome",
]
# loading rules: files -> a RuleSet of Rules, or LoadErrors located in the files; what a rule reads
__all__ += [
    "Action",
    "LabelSelector",
    "LoadError",
    "LoadResult",
    "Rule",
    "RuleLoadError",
    "RuleSet",
    "SourceLocation",
    "compile_documents",
    "indexed_kinds",
    "load_rules",
    "rule_files",
    "top_level",
]
# site overlays on the pack (applied by the loader before compiling) and exceptions (applied per
# request: RuleSet.exceptions from files, AdmissionInput/ClusterContext.exceptions from the cluster)
__all__ += [
    "EXCEPTION_VALIDATOR",
    "OVERLAID_BY",
    "PolicyException",
    "apply_overlays",
    "exception_errors",
    "exception_problems",
    "parse_exception",
    "parse_time",
    "unknown_rules",
]
# the kind table: workload kinds, their API and pod templates (autogen, audit, export, registration)
__all__ += [
    "BY_KIND",
    "KINDS",
    "UNMUTATED_KINDS",
    "WORKLOADS",
    "WORKLOAD_KINDS",
    "KindApi",
    "WorkloadKind",
]
# the schema of the rule, configuration and test documents
__all__ += [
    "API_VERSION",
    "CONFIG_KIND",
    "EXCEPTION_KIND",
    "EXCEPTION_SCHEMA",
    "OVERLAY_KIND",
    "OVERLAY_SCHEMA",
    "POLICY_KIND",
    "POLICY_SCHEMA",
    "SCHEMAS",
    "TEST_KIND",
    "TEST_SCHEMA",
]
# CEL tools the export needs: the one CEL scanner and parser (celsyntax), the helpers' rewrite
# (celhelpers), compiled expressions and their plain results
__all__ += [
    "CompiledExpression",
    "celhelpers",
    "celsyntax",
    "plain_result",
]
# the types of a rule's params, for lint (paramtypes.py)
__all__ += ["inferred_params_schema", "param_cel_types", "param_type_error"]
# accelerators and quantities
__all__ += [
    "Accelerators",
    "QuantityError",
    "parse_quantity",
    "quantity_of",
]
# the mutation registry, and the operations and value patterns the export translates
__all__ += [
    "DNS_SUBDOMAIN",
    "LABEL_VALUE",
    "MUTATIONS",
    "AddToleration",
    "Mutation",
    "MutationView",
    "RequireNodeAffinity",
    "SetMetadata",
    "SetPodField",
    "SetQueueName",
    "mutation_name",
]
# JSON documents
__all__ += [
    "is_map",
]
