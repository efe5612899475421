"""The YAML compatibility corpus: audit reads manifests as kubectl does, on the fast path and the reference one.

kubectl decodes manifests with sigs.k8s.io/yaml (YAMLToJSON), which resolves plain scalars with
go-yaml v2 and then writes JSON. The expected values below come from those sources:

- gopkg.in/yaml.v2 v2.4.0 resolve.go, `resolveMapList`: y/Y/yes/Yes/YES/true/True/TRUE/on/On/ON are
  true, n/N/no/No/NO/false/False/FALSE/off/Off/OFF false, ""/~/null/Null/NULL null, .nan/.inf/-.inf
  floats, `<<` the merge key;
- resolve.go `resolve()`: a plain scalar starting with a digit or sign has its "_" removed and goes
  through strconv.ParseInt(s, 0, 64) (0x hex, 0o and leading-0 octal, 0b binary), then ParseUint,
  then `yamlStyleFloat` = ^[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?$ (so `1e3` and `08`
  are floats); anything else is a string (so sexagesimal `1:20` is one);
- decode.go: "It looks like a timestamp but for backward compatibility reasons we set it as a
  string" when decoding into interface{} (which YAMLToJSON does);
- JSON object keys are strings: `true:` and `1:` arrive as "true" and "1";
- quoted scalars and `!!str` are strings whatever they look like.

PyYAML's own YAML 1.1 resolver differs on y/n, 1e3, 0o17, 08, 1:20 and timestamps: the corpus
pins the kubectl answer. Duplicate keys are errors with file:line:column (kubectl apply refuses
them too: "mapping key ... already defined" from the strict decoder).
"""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.audit.fastyaml import Documents
from webhook.audit.sources import Loader

CORPUS: list[tuple[str, object]] = [
    # booleans: go-yaml v2 resolveMapList (YAML 1.1 words, y/n included)
    *[(word, True) for word in ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")],
    *[(word, False) for word in ("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF")],
    ("yES", "yES"),  # not in the table: a string
    ("tRUE", "tRUE"),
    # null
    ("~", None),
    ("null", None),
    ("NULL", None),
    ("", None),
    # integers: ParseInt(s with "_" removed, base 0)
    ("0", 0),
    ("42", 42),
    ("+42", 42),
    ("-42", -42),
    ("1_000", 1000),
    ("017", 15),  # leading 0: octal
    ("0o17", 15),
    ("0x1F", 31),
    ("-0x10", -16),
    ("0b101", 5),
    ("9223372036854775807", 9223372036854775807),
    ("18446744073709551615", 18446744073709551615),  # ParseUint
    # floats: yamlStyleFloat and the .inf/.nan words
    ("1.5", 1.5),
    ("1.", 1.0),
    (".5", 0.5),
    ("1e3", 1000.0),
    ("-2.5E-1", -0.25),
    ("08", 8.0),  # not octal, but a float
    ("99999999999999999999", 1e20),
    (".inf", math.inf),
    ("-.Inf", -math.inf),
    # strings
    ("1:20", "1:20"),  # no sexagesimal in go-yaml v2
    ("2024-01-02", "2024-01-02"),  # timestamps stay strings
    ("2024-01-02T03:04:05Z", "2024-01-02T03:04:05Z"),
    ("100m", "100m"),
    ("16Gi", "16Gi"),
    ("0x", "0x"),
    ("+", "+"),
    ("-x", "-x"),
    ("=", "="),
    ("'yes'", "yes"),
    ('"0x1F"', "0x1F"),
    ("!!str 42", "42"),
    ("!!str yes", "yes"),
    ("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/pytorch:24.05-py3"),
]


def _fast(text: str) -> list[object]:
    return list(Documents(text, Loader))


def _reference(text: str) -> list[object]:
    return list(yaml.load_all(text, Loader=Loader))


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize(("scalar", "expected"), CORPUS, ids=[c[0] or "empty" for c in CORPUS])
def test_plain_scalars_as_kubectl_reads_them(scalar, expected):
    for text in (f"value: {scalar}\n", f"- {scalar}\n"):
        for load in (_fast, _reference):
            (document,) = load(text)
            value = document["value"] if isinstance(document, dict) else document[0]
            assert _same(value, expected), (load.__name__, text, value)
    # a merge key sends the document down the reference constructor: the same answer there
    (merged,) = _fast(f"base: &b {{value: {scalar}}}\nobj:\n  <<: *b\n")
    assert _same(merged["obj"]["value"], expected)


def test_nan_is_a_float():
    for load in (_fast, _reference):
        assert math.isnan(load("v: .NaN\n")[0]["v"])


def test_keys_are_json_strings():
    # `n:` is the boolean false in go-yaml v2, and so the JSON key "false"
    text = "true: a\n1: b\nn: c\n'x': d\n"
    assert _fast(text) == _reference(text) == [{"true": "a", "1": "b", "false": "c", "x": "d"}]


def test_anchors_aliases_and_merge_keys():
    text = "defaults: &d {cpu: '1', gpu: 1}\na: *d\nb:\n  <<: *d\n  gpu: 2\nlist: &l [1, 2]\nagain: *l\n"
    expected = {
        "defaults": {"cpu": "1", "gpu": 1},
        "a": {"cpu": "1", "gpu": 1},
        "b": {"cpu": "1", "gpu": 2},
        "list": [1, 2],
        "again": [1, 2],
    }
    assert _fast(text) == _reference(text) == [expected]


def test_documents_and_empty_documents():
    text = "---\na: 1\n---\n---\n- x\n...\n"
    assert _fast(text) == _reference(text) == [{"a": 1}, None, ["x"]]


def test_explicit_tags_leave_the_fast_path_with_the_same_answer():
    text = "data: !!binary aGVsbG8=\nnum: !!int '7'\nf: !!float '1.5'\nplain: 1e3\n"
    assert _fast(text) == _reference(text) == [{"data": b"hello", "num": 7, "f": 1.5, "plain": 1000.0}]


@pytest.mark.parametrize(
    ("text", "where", "says"),
    [
        ("apiVersion: v1\nkind: Pod\nkind: Pod\n", "3:1", "duplicate key 'kind'"),
        ("a:\n  b: 1\n  c: 2\n  b: 3\n", "4:3", "duplicate key 'b'"),
        ("true: 1\n'true': 2\n", "2:1", "duplicate key 'true'"),  # the same JSON key
        ("metadata: {name: x\n", "2:1", "invalid YAML"),
        ("a: b: c\n", "1:5", "invalid YAML"),
        ("\tkey: 1\n", "1:1", "invalid YAML"),
    ],
)
def test_errors_name_file_line_and_column(run, tmp_path, text, where, says):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, _, err = run(str(path), "-o", "json")
    assert code == 2
    assert f"{path}:{where}:" in err and says in err, err


_SCALARS = st.one_of(
    st.sampled_from([c[0] for c in CORPUS if not c[0].startswith(("!", "'", '"'))]),
    st.text(alphabet="abxyz019_.-+:eEoO ", min_size=1, max_size=8),
)
_KEYS = st.text(alphabet="abcxyz_-./", min_size=1, max_size=6)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(_KEYS, _VALUES, min_size=1, max_size=5))
def test_fast_and_reference_loaders_agree(document):
    # the strings are written as plain scalars where YAML allows it: both loaders then resolve them
    text = yaml.safe_dump(document, default_flow_style=False, allow_unicode=True)
    text = text.replace("'", "")  # unquote, so that the resolvers decide
    try:
        reference = _reference(text)
    except yaml.YAMLError:
        with pytest.raises(yaml.YAMLError):
            _fast(text)
        return
    assert repr(_fast(text)) == repr(reference)
