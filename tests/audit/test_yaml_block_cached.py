"""A scalar's text known from an earlier line is still PyYAML's layout where it no longer fits.

block.py reads the texts it knows inline (a cache hit, without a method call); the width rule
(PyYAML folds a plain or quoted scalar with spaces past the line width) must hold on that path
too, in mappings and in sequences: the same text, short enough at one column, is too long at a
deeper one.
"""

from __future__ import annotations

import pytest

from webhook.kubeyaml import block, plain_yaml, pyyaml_dump

TEXT = "a sentence with spaces " * 3 + "and a tail"  # 79 characters: fits after `k: ` only at width 82


@pytest.mark.parametrize(
    "value",
    [
        {"k": TEXT, "deeper": {"and": {"deeper": TEXT}}},
        {"k": TEXT, "items": [[[TEXT]]]},
        {"k": TEXT, "items": [TEXT, {"x": TEXT}]},
        {"k": '"quoted" ' + TEXT, "items": [["quoted " + TEXT]]},
    ],
)
@pytest.mark.parametrize("width", [80, 82, 90])
def test_known_texts_keep_the_width_rule(value: dict, width: int) -> None:
    writer = block.Writer(pyyaml_dump)
    writer.lines({"k": value["k"]}, width)  # the text is now known, from a short column
    lines = writer.lines(value, width)
    assert lines is None or "".join(lines) == pyyaml_dump(value, width)
    assert plain_yaml(value, width) == pyyaml_dump(value, width)


def test_a_long_text_in_a_sequence_goes_to_pyyaml_when_known() -> None:
    writer = block.Writer(pyyaml_dump)
    assert writer.lines({"k": TEXT}, 82) is not None
    assert writer.lines({"items": [[[TEXT]]]}, 82) is None  # `- - - ` + 79 characters: past the width
