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

from webhook.audit.sources import read_manifests
from webhook.kubeyaml import Documents, Loader, rapid

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


def _libyaml(text: str) -> list[object]:
    return list(Documents(text, Loader))


def _fast(text: str) -> list[object]:
    """What audit reads: rapidyaml + JSON when rapid.py takes the text, else the libyaml path.

    Whenever rapid.py takes a text, its answer must be the libyaml path's (checked here on every
    case of this corpus, so each case tests both fast paths against the reference).
    """
    taken = rapid.documents(text.encode())
    slow = _libyaml(text)
    if taken is not None:
        assert repr(taken) == repr(slow), (text, taken, slow)
    return slow


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
            _libyaml(text)
        assert rapid.documents(text.encode()) is None  # an error is the libyaml path's to word
        return
    assert repr(_fast(text)) == repr(reference)


# What rapid.py must leave to the libyaml path (it would read them otherwise than kubectl), and
# what it must take (else it is no faster). Each taken text is checked against the reference.
LEFT = [
    "a: 1\na: 2\n",  # duplicate keys: an error with its mark, never the last value
    "a: {b: 1, b: 2}\n",
    "- {a: 'say \"hi\": x', a: 1}\n",  # ... also when a value holds `": `
    "a: yes\n",  # go-yaml's words and numbers that are no JSON literals
    "a: 'yes'\n",  # ... quoted too: in JSON a quoted `yes` looks like a plain one
    "- y\n",
    "a: 0777\n",
    "a: 1_000\n",
    "a: 0x1F\n",
    "a: +1\n",
    "a: ~\n",
    "a: .inf\n",
    "a: inf\n",  # rapidyaml writes ".inf"
    "a: 1e400\n",
    "yes: a\n",  # keys: the JSON key "true"
    "1.5: a\n",
    "01: a\n",
    "null: a\n",
    "a: &x 1\nb: *x\n",  # anchors, aliases, tags, merge keys, complex keys, directives
    "a: [*x]\n",
    "a: !!str 1\n",
    "a:\n  <<: {b: 1}\n",
    "? a\n: b\n",
    "%YAML 1.1\n---\na: 1\n",
    "a: 1\r\nb: 2\r\n",  # carriage returns, tabs, escapes, NEL, BOM
    "a:\t1\n",
    'a: "\\x41"\n',
    "a: x\u0085y\n",
    "\ufeffa: 1\n",
    "a: b: c\n",  # invalid YAML
    "metadata: {name: x\n",
]
TAKEN = [
    "",
    "---\n",
    "---\na: 1\n---\n---\n- x\n...\n",
    "a: [1, 2, {b: c}]\nd: 'it''s'\n",
    "a: 'say \"hi\": x'\nb: 'q\": '\n",
    "a: |\n  line1\n  line2\nb: >-\n  f1\n  f2\n\n  f3\nc: |+\n  x\n\nd: |2\n    x\n",
    'a: plain\n  continued\nk: "a\n  b"\n',
    "cpu: '4'\nport: 8080\nreplicas: \"3\"\nratio: 1.5\nbig: 1e3\nneg: -0\nhalf: .5\nok: 'true'\n",
    "1: a\ntrue: b\n",
    "date: 2024-01-02\nstamp: 2024-01-02T03:04:05Z\ntime: 1:20\n",
    "huge: 18446744073709551616\nlow: -9223372036854775809\nmax: 18446744073709551615\n",
    "s: a*b\nu: http://x?y=1&z\n",
    "a: caf\u00e9\nb: \u201cq\u201d\n",
    "x: {}\nw: []\nz: ''\ne:\n",
    "a: 1 # comment\nb: 'x' # c\n# end\n",
]


@pytest.mark.parametrize("text", LEFT)
def test_rapidyaml_leaves_what_it_would_read_otherwise(text):
    assert rapid.documents(text.encode()) is None


@pytest.mark.parametrize("text", TAKEN)
def test_rapidyaml_takes_ordinary_manifests_with_the_same_answer(text):
    taken = rapid.documents(text.encode())
    assert taken is not None
    assert repr(taken) == repr(_reference(text))


def test_bench_pods_take_the_rapid_path(tmp_path):
    from tests.support.manifests import mix

    mix(tmp_path, 300)  # pods, Jobs, Deployments, PyTorchJobs: flow mappings, quoted numbers
    (path,) = tmp_path.iterdir()
    taken = rapid.documents(path.read_bytes())
    assert taken is not None and len([d for d in taken if d]) == 300
    assert repr(taken) == repr(_reference(path.read_text()))
    origins = [item.origin for item in read_manifests([str(path)])]
    assert origins[:2] == [f"{path}#0", f"{path}#1"] and len(origins) == 300


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))


@pytest.mark.skipif(not rapid.available() or not __import__("os").path.exists("/proc/self/status"), reason="Linux")
def test_rapidyaml_memory_stays_flat(tmp_path):
    # rapidyaml's emit_json_malloc leaked its output (~600 KiB per 1,000 pods: 98 MiB at 100k)
    from tests.support.manifests import pods

    pods(tmp_path, 300)
    data = next(tmp_path.iterdir()).read_bytes()
    assert rapid.documents(data) is not None
    before = _rss_kib()
    for _ in range(150):  # 45,000 pods: the leak was ~27 MiB
        rapid.documents(data)
    assert _rss_kib() - before < 8 * 1024
