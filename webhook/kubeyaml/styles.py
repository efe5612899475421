"""YAML as the project writes it: one named style for each kind of file, each exactly PyYAML's bytes.

Every style writes mappings in block style with their keys in insertion order; what differs is
the dumper (libyaml's C emitter or PyYAML's own), the line width and how strings and lists look:

- `MANIFESTS`: `gpu-webhook manifests` output (libyaml, 120 columns);
- `POLICY_REPORT`: `audit -o policyreport` (libyaml, 80 columns);
- `REGISTRATION`: manifests/base/crds.yaml and webhooks.yaml: CEL and other multi-line strings as
  `|` blocks, lists of strings on one line (`[CREATE, UPDATE]`), 110 columns;
- `HELM`: the chart's generated files: multi-line strings (the rule files of the rules ConfigMap)
  as `|` blocks, lines never folded (a template action must stay on its line);
- `EXPORT`: `gpu-webhook export`: no anchors (a list used twice is written twice), UTF-8 kept;
- `RULE_FILES`: a rule file re-written without some of its documents (`manifests --native`);
- `SUITE_DIFF`: the expected and actual values of a failed GPUPolicyTest case, 100 columns.

tests/audit/test_report_bytes.py and the derived-file tests (tests/deploy, tests/helm) pin the bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TextIO

import yaml

_STR, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:seq"
_FAST: type = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's emitter where compiled in


def _literal_blocks(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    return dumper.represent_scalar(_STR, value, style="|" if "\n" in value else None)


def _flow_string_lists(dumper: yaml.SafeDumper, value: list[Any]) -> yaml.Node:
    return dumper.represent_sequence(_SEQ, value, flow_style=all(isinstance(item, str) for item in value))


class _RegistrationDumper(yaml.SafeDumper):
    """Kubernetes-style YAML: CEL as `|-` blocks, short lists of scalars on one line."""


_RegistrationDumper.add_representer(str, _literal_blocks)
_RegistrationDumper.add_representer(list, _flow_string_lists)


class _HelmDumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks, readable in the chart."""


_HelmDumper.add_representer(str, _literal_blocks)


class _NoAliasesDumper(yaml.SafeDumper):
    """Plain YAML: the same list used twice is written twice, never as an anchor."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class Style:
    """How one kind of file is written: a PyYAML dumper and its options."""

    dumper: type
    width: int = 80  # PyYAML's default
    allow_unicode: bool = False

    def dump(self, value: Any) -> str:
        """One document."""
        return self.dump_all([value])

    def dump_all(self, documents: Iterable[Any]) -> str:
        """A stream of documents, `---` between them."""
        return yaml.dump_all(documents, Dumper=self.dumper, **self._options())  # type: ignore[no-any-return]

    def write_all(self, documents: Iterable[Any], out: TextIO) -> None:
        """The stream dump_all returns, written to `out` as the emitter goes."""
        yaml.dump_all(documents, out, Dumper=self.dumper, **self._options())

    def _options(self) -> dict[str, Any]:
        return {
            "sort_keys": False,
            "default_flow_style": False,
            "width": self.width,
            "allow_unicode": self.allow_unicode,
        }


MANIFESTS = Style(_FAST, width=120)
POLICY_REPORT = Style(_FAST)
REGISTRATION = Style(_RegistrationDumper, width=110)
HELM = Style(_HelmDumper, width=1_000_000)
EXPORT = Style(_NoAliasesDumper, width=100, allow_unicode=True)
RULE_FILES = Style(yaml.SafeDumper)
SUITE_DIFF = Style(yaml.SafeDumper, width=100)
