"""The schema check of GPUPolicyTest documents: what `gpu-webhook test` refuses and `gpu-webhook lint` reports.

Apart from suite.py so that lint checks suites without importing what running them needs (the audit's
namespace context).
"""

from __future__ import annotations

from jsonschema import Draft202012Validator

from webhook.engine import LoadError, SourceLocation
from webhook.engine.documents import TEST_SCHEMA
from webhook.kubeyaml import Document

_VALIDATOR = Draft202012Validator(TEST_SCHEMA)


def schema_problems(document: Document) -> list[LoadError]:
    """Every way a GPUPolicyTest document breaks its schema, each with its line and column."""
    problems = []
    for invalid in sorted(_VALIDATOR.iter_errors(document.data), key=lambda e: list(map(str, e.absolute_path))):
        line, column = document.position(tuple(invalid.absolute_path))
        where = "/".join(map(str, invalid.absolute_path)) or "document"
        message = invalid.message
        if invalid.validator == "oneOf" and where.startswith("spec/cases/"):
            message = "a case needs exactly one of `object` or `objectFile`"
        problems.append(LoadError(SourceLocation(document.file, line, column), f"{where}: {message}"))
    return problems
