"""YAML as kubectl reads it and as PyYAML writes it: one package for every door.

What to import for what:

- manifests read as kubectl reads them (`audit`, `explain`, the value files of suites):
  `kubectl_documents(text)`, the reference (`Loader`: go-yaml v2's plain scalars, duplicate keys
  refused), and `Documents(stream, Loader)`, the same objects faster (manifests.py); any reader's
  error for unreadable text is a `ParseError` (PyYAML's YAMLError); whole files through
  rapidyaml and JSON where that is provably the same: `from webhook.kubeyaml import rapid`,
  `rapid.documents(data)` (rapid.py, imported on its own so that only the doors that read
  manifest files load rapidyaml);
- rule files and GPUPolicyTest suites with file:line:column: `load_documents(text, file)` gives
  `Document`s (`position`, `text_position`), a syntax error is a `YamlError` (located.py);
- YAML without positions: `plain_documents`, `plain_document` (yaml.safe_load at libyaml's
  speed) and `document_kinds` (located.py);
- one plain scalar or mapping key as kubectl reads it: `go_plain`, `json_key`; `KubeLoader`
  is the safe loader with those rules, the base of both loaders above (scalars.py);
- block YAML for diffs and reports: `plain_yaml(value)`, `plain_yaml_pair(before, after)`;
  `pyyaml_dump` (PyYAML's dumper alone) and `BLOCK_WRITER` are what the tests compare (block.py);
- every file the project writes, in its named style: `styles.MANIFESTS.write_all(documents, out)`,
  `styles.REGISTRATION.dump_all(documents)`, `styles.POLICY_REPORT.dump(report)`, ... (styles.py).

No module of webhook/ or bench/ outside this package imports PyYAML (tests/test_layering.py checks).

Nothing here opens a file or a socket: callers hand in the text, so the engine may read its
rules with located.py. tests/audit/test_yaml_compat.py pins the reading to kubectl's,
tests/audit/test_yaml_block.py the writing to PyYAML's.
"""

from . import styles
from .block import BLOCK_WRITER, plain_yaml, plain_yaml_pair, pyyaml_dump
from .located import Document, YamlError, document_kinds, load_documents, plain_document, plain_documents
from .manifests import Documents, DuplicateKey, Loader, ParseError, kubectl_documents
from .scalars import KubeLoader, go_plain, json_key

__all__ = [
    "BLOCK_WRITER",
    "Document",
    "Documents",
    "DuplicateKey",
    "KubeLoader",
    "Loader",
    "ParseError",
    "YamlError",
    "document_kinds",
    "go_plain",
    "json_key",
    "kubectl_documents",
    "load_documents",
    "plain_document",
    "plain_documents",
    "plain_yaml",
    "plain_yaml_pair",
    "pyyaml_dump",
    "styles",
]
