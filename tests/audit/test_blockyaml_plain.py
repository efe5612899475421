"""blockyaml writes simple strings as PyYAML does without asking the dumper: pinned to the dumper itself."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.audit import blockyaml
from webhook.audit.context import plain_yaml, pyyaml_dump

# what the fast path takes: a letter first, then letters, digits and `_./-`
SIMPLE = st.from_regex(r"\A[A-Za-z][A-Za-z0-9_./-]{0,12}\Z")
# YAML 1.1's words (PyYAML's bool and null resolvers) and their near misses, which PyYAML writes plain
WORDS = [*sorted(blockyaml._WORDS), "y", "n", "Y", "N", "yES", "nULL", "nan", "inf", "tRUE", "Off1", "on-", "no."]


@settings(max_examples=600, deadline=None)
@given(SIMPLE)
def test_simple_strings_are_written_as_the_dumper_writes_them(text):
    assert blockyaml._PLAIN.fullmatch(text)
    taken = text not in blockyaml._WORDS
    assert (pyyaml_dump({"k": text}, 1 << 20) == f"k: {text}\n") is taken


@pytest.mark.parametrize("word", WORDS)
def test_yaml_words_stay_the_dumpers(word):
    writer = blockyaml.Writer(pyyaml_dump)
    assert writer.lines({"k": word, "l": [word]}) == pyyaml_dump({"k": word, "l": [word]}, 80).splitlines(True)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(SIMPLE, st.one_of(SIMPLE, st.lists(SIMPLE, max_size=3)), max_size=5))
def test_documents_of_simple_strings_match_pyyaml(value):
    assert plain_yaml(value) == pyyaml_dump(value, 80)
