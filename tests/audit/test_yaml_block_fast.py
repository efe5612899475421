"""block.py writes simple strings as PyYAML does without asking the dumper: pinned to the dumper itself."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.kubeyaml import block, plain_yaml, pyyaml_dump

# what the fast path takes: a letter first, then letters, digits and `_./-`
SIMPLE = st.from_regex(r"\A[A-Za-z][A-Za-z0-9_./-]{0,12}\Z")
# YAML 1.1's words (PyYAML's bool and null resolvers) and their near misses, which PyYAML writes plain
WORDS = [*sorted(block._WORDS), "y", "n", "Y", "N", "yES", "nULL", "nan", "inf", "tRUE", "Off1", "on-", "no."]


@settings(max_examples=600, deadline=None)
@given(SIMPLE)
def test_simple_strings_are_written_as_the_dumper_writes_them(text):
    assert block._PLAIN.fullmatch(text)
    taken = text not in block._WORDS
    assert (pyyaml_dump({"k": text}, 1 << 20) == f"k: {text}\n") is taken


@pytest.mark.parametrize("word", WORDS)
def test_yaml_words_stay_the_dumpers(word):
    writer = block.Writer(pyyaml_dump)
    assert writer.lines({"k": word, "l": [word]}) == pyyaml_dump({"k": word, "l": [word]}, 80).splitlines(True)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(SIMPLE, st.one_of(SIMPLE, st.lists(SIMPLE, max_size=3)), max_size=5))
def test_documents_of_simple_strings_match_pyyaml(value):
    assert plain_yaml(value) == pyyaml_dump(value, 80)


# pair(): the two sides of a diff, the second copying what equals the first at the same place
LEAF = st.one_of(
    st.sampled_from([0, 1, 1.0, -0.0, 0.0, True, False, None, float("nan"), "1", "yes", "a b", "x" * 90]),
    SIMPLE,
)
TREE = st.recursive(
    LEAF,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(SIMPLE, inner, max_size=4)),
    max_leaves=12,
)


@st.composite
def edited(draw):
    """A document and a copy with some entries changed, added, removed or reordered (what patches do)."""
    before = draw(st.dictionaries(SIMPLE, TREE, min_size=1, max_size=4))
    after = copy.deepcopy(before)

    def edit(node, depth):
        if not isinstance(node, dict) or not node:
            return
        key = draw(st.sampled_from(sorted(node)))
        action = draw(st.sampled_from(["replace", "add", "remove", "reorder", "descend"]))
        if action == "replace":
            node[key] = draw(TREE)
        elif action == "add":
            node[draw(SIMPLE)] = draw(TREE)
        elif action == "remove":
            del node[key]
        elif action == "reorder":
            node[key] = node.pop(key)
        elif depth < 4:
            edit(node[key], depth + 1)

    for _ in range(draw(st.integers(0, 3))):
        edit(after, 0)
    return before, after


@settings(max_examples=500, deadline=None)
@given(edited())
def test_pair_writes_what_lines_writes(documents):
    before, after = documents
    writer = block.Writer(pyyaml_dump)
    assert writer.pair(before, after) == (writer.lines(before), writer.lines(after))


def test_pair_does_not_copy_values_python_finds_equal():
    writer = block.Writer(pyyaml_dump)
    for one, other in (({"a": 1}, {"a": True}), ({"a": 1}, {"a": 1.0}), ({"a": 1, "b": 2}, {"b": 2, "a": 1})):
        before, after = {"spec": {"x": one}}, {"spec": {"x": other}}
        assert writer.pair(before, after) == (writer.lines(before), writer.lines(after))
