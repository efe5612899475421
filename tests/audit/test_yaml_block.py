"""block.py writes the bytes PyYAML writes (plain_yaml), or leaves the document to PyYAML."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.audit.sources import read_manifests
from webhook.kubeyaml import BLOCK_WRITER, plain_yaml, pyyaml_dump

_TEXTS = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "a b",
            "yes",
            "1",
            "1.5",
            "~",
            "null",
            "true",
            "-",
            "- x",
            "a: b",
            "#x",
            "x #y",
            "'q'",
            '"q"',
            "a\nb",
            "tab\there",
            "café",
            "“q”",
            "*/5 * * * *",
            "nvcr.io/nvidia/pytorch:24.05-py3",
            "x" * 90,
            "word " * 20,
            "2024-01-02",
            "0777",
            "@x",
            "%x",
            "!x",
            "&x",
            "[x]",
            "{x}",
            "a,b",
            "?",
        ]
    ),
    st.text(max_size=12),
    st.text(alphabet="ab :-'\"#\n", max_size=100),
)
_SCALARS = st.one_of(_TEXTS, st.integers(), st.floats(), st.booleans(), st.none())
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_TEXTS, inner, max_size=4)),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(_VALUES, st.sampled_from([80, 120, 30]))
def test_the_same_bytes_as_pyyaml(value, width):
    lines = BLOCK_WRITER.lines(value, width)
    if lines is not None:
        assert "".join(lines) == pyyaml_dump(value, width)
    assert plain_yaml(value, width) == pyyaml_dump(value, width)


def test_manifests_take_the_fast_path(tmp_path):
    from tests.support.manifests import mix

    mix(tmp_path, 200)
    for item in read_manifests([str(tmp_path)]):
        lines = BLOCK_WRITER.lines(item.object)
        assert lines is not None, item.object
        assert "".join(lines) == pyyaml_dump(item.object, 80)


@pytest.mark.parametrize(
    "value",
    [
        "scalar",  # not a mapping or list: PyYAML writes `...` after it
        {"k": "word " * 30},  # folded at the width
        {"k": "a\nb"},  # several lines
        {1: "int key"},
        {"k" * 130: 1},  # a complex key (`? `)
    ],
)
def test_unsure_layouts_are_left_to_pyyaml(value):
    assert BLOCK_WRITER.lines(value) is None
    assert plain_yaml(value) == pyyaml_dump(value, 80)


def test_equal_scalars_written_differently():
    value = [-0.0, 0.0, 1, True, 1.0]  # equal (or hash-equal) values: never one cache entry
    assert plain_yaml(value) == pyyaml_dump(value, 80) == "- -0.0\n- 0.0\n- 1\n- true\n- 1.0\n"
