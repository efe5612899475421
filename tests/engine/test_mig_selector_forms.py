"""Odd but valid MIG selectors, as a tenant may write them: what `pinned_profiles` reads as pinned must be
all that the selector lets through.

The selector is CEL over `device` (resource.k8s.io/v1 DeviceSelector; NVIDIA/k8s-dra-driver-gpu publishes
a MIG device's profile as the attribute `profile` of the domain `gpu.nvidia.com`). A profile allow-list
(rules/mig-profiles.yaml) trusts the pinned set, so a selector read as pinned while it also admits
another profile is a bypass. The property test evaluates generated selectors with the CEL runtime the
engine uses (cel-expr-python) on a device of each profile, and checks that every profile the selector
accepts is one `pinned_profiles` says it pins.
"""

from __future__ import annotations

import pytest
from cel_expr_python import cel
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.engine.resources import ANY_PROFILE, pinned_profiles

DOT = "device.attributes['gpu.nvidia.com'].profile"
BRACKETS = "device.attributes['gpu.nvidia.com']['profile']"
PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb")


def pins(*expressions: str) -> list[str]:
    return pinned_profiles([{"cel": {"expression": expression}} for expression in expressions])


@pytest.mark.parametrize(
    ("expression", "pinned"),
    [
        # `||` at the top, after a parenthesised group: the group closes, so `|| true` is at depth 0
        (f"{DOT} == '1g.10gb' && (true) || true", [ANY_PROFILE]),
        (f"{DOT} == '1g.10gb' && [1][0] == 1 || true", [ANY_PROFILE]),  # a list closes too
        (f"{DOT} == '1g.10gb' && {{'a': 1}}.a == 1 || true", [ANY_PROFILE]),  # and a map
        (f"{DOT} == '1g.10gb' && ((true)) ? true : true", [ANY_PROFILE]),
        (f"{DOT} == '1g.10gb' && (true || false)", ["1g.10gb"]),  # `||` inside a group is fine
        (f"({DOT} == '1g.10gb') && true", [ANY_PROFILE]),  # a parenthesised term is not read
        (f"true && {DOT} == '2g.20gb'", ["2g.20gb"]),
        (f"{BRACKETS} == '2g.20gb'", ["2g.20gb"]),
        (f"'2g.20gb' == {BRACKETS}", ["2g.20gb"]),
        (f"{BRACKETS} in ['1g.10gb', '3g.40gb']", ["1g.10gb", "3g.40gb"]),
        # the bracketed attribute must name `profile`, in the NVIDIA domain, and nothing after it
        ("device.attributes['gpu.nvidia.com']['type'] == '1g.10gb'", [ANY_PROFILE]),
        ("device.attributes['gpu.nvidia.com']['profile'].size() == 7", [ANY_PROFILE]),
        ("device.attributes['gpu.nvidia.com']['profile'] + '' == '1g.10gb'", [ANY_PROFILE]),
        ("device.attributes['gpu.nvidia.com'].type == '1g.10gb'", [ANY_PROFILE]),
        ("device.attributes['other.example'].profile == '1g.10gb'", [ANY_PROFILE]),
        ("device.attributes['gpu.nvidia.com'].profile.x == '1g.10gb'", [ANY_PROFILE]),
        ("device.capacities['gpu.nvidia.com'].profile == '1g.10gb'", [ANY_PROFILE]),
        ("x.attributes['gpu.nvidia.com'].profile == '1g.10gb'", [ANY_PROFILE]),
        ("device.attributes('gpu.nvidia.com').profile == '1g.10gb'", [ANY_PROFILE]),
        ("device.attributes['gpu.nvidia.com'](profile) == '1g.10gb'", [ANY_PROFILE]),
        # the compared value must be one plain literal, the list a list of plain literals
        (f"{DOT} == '1g.10gb' + ''", [ANY_PROFILE]),
        (f"{DOT} == x", [ANY_PROFILE]),
        (f"{DOT} in ['1g.10gb' '2g.20gb']", [ANY_PROFILE]),
        (f"{DOT} in ['1g.10gb', x]", [ANY_PROFILE]),
        (f"{DOT} in ('1g.10gb', '2g.20gb')", [ANY_PROFILE]),
        (f"{DOT} in ['1g.10gb', '2g.20gb'", [ANY_PROFILE]),
        (f"{DOT} in []", []),
        (f"{DOT} in [1]", [ANY_PROFILE]),
        (f"{DOT} in '1g.10gb'", [ANY_PROFILE]),
        (f'{DOT} == "1g.10gb"', ["1g.10gb"]),
        (f"{DOT} == r'1g.10gb'", [ANY_PROFILE]),
        (f"{DOT} == '1g.10\"gb'", ['1g.10"gb']),
        (f"{DOT} == '''1g.10gb'''", [ANY_PROFILE]),
        (f"{DOT} == 1", [ANY_PROFILE]),
        (f"{DOT} == {DOT}", [ANY_PROFILE]),
        (f"{DOT} == '1g.10gb' && {DOT} in ['1g.10gb', '2g.20gb']", ["1g.10gb"]),
        (f"{DOT} in ['1g.10gb', '2g.20gb'] && {DOT} == '2g.20gb'", ["2g.20gb"]),
        (f"{DOT} == '1g.10gb' && {DOT} in ['7g.80gb'] && true", []),
    ],
)
def test_what_a_selector_pins(expression: str, pinned: list[str]) -> None:
    assert pins(expression) == pinned


def test_every_selector_holds_so_the_pins_intersect() -> None:
    assert pins(f"{DOT} in ['1g.10gb', '2g.20gb']", "true", f"{DOT} in ['2g.20gb', '3g.40gb']") == ["2g.20gb"]
    assert pins("true", "true") == [ANY_PROFILE]
    assert pinned_profiles("not a list") == [ANY_PROFILE]
    assert pinned_profiles([{"cel": {"expression": 3}}, {"cel": "x"}, "x", {"cel": {"expression": "("}}]) == [
        ANY_PROFILE
    ]


# -- the property: read as pinned => admits nothing else ------------------------------------------

_ENV = cel.NewEnv(variables={"device": cel.Type.DYN})


def _accepts(expression: str, profile: str) -> bool:
    device = {"attributes": {"gpu.nvidia.com": {"profile": profile, "type": "mig"}}}
    result = _ENV.compile(expression).eval(_ENV.Activation({"device": device}))
    return result.type() == cel.Type.BOOL and result.value() is True


_literal = st.sampled_from(PROFILES).map(lambda p: f"'{p}'")
_attribute = st.sampled_from((DOT, BRACKETS))
_atom = st.one_of(
    st.tuples(_attribute, _literal).map(lambda t: f"{t[0]} == {t[1]}"),
    st.tuples(_literal, _attribute).map(lambda t: f"{t[0]} == {t[1]}"),
    st.tuples(_attribute, _literal).map(lambda t: f"{t[0]} != {t[1]}"),
    st.tuples(_attribute, st.lists(_literal, max_size=3)).map(lambda t: f"{t[0]} in [{', '.join(t[1])}]"),
    st.sampled_from(
        ("true", "false", "[1][0] == 1", "{'a': true}.a", "device.attributes['gpu.nvidia.com'].type == 'mig'")
    ),
)
selectors = st.recursive(
    _atom,
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda t: f"{t[0]} && {t[1]}"),
        st.tuples(inner, inner).map(lambda t: f"{t[0]} || {t[1]}"),
        inner.map(lambda e: f"({e})"),
        inner.map(lambda e: f"!({e})"),
        st.tuples(inner, inner, inner).map(lambda t: f"{t[0]} ? {t[1]} : {t[2]}"),
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(selectors)
def test_a_pinned_selector_admits_no_other_profile(expression: str) -> None:
    pinned = pins(expression)
    if pinned == [ANY_PROFILE]:
        return
    admitted = [profile for profile in PROFILES if _accepts(expression, profile)]
    assert set(admitted) <= set(pinned), f"{expression!r} read as pinned to {pinned}, admits {admitted}"


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(PROFILES), selectors)
def test_a_top_level_or_always_unpins(profile: str, other: str) -> None:
    assert pins(f"{DOT} == '{profile}' && ({other}) || true") == [ANY_PROFILE]
    assert pins(f"{DOT} == '{profile}' && {other} || true") == [ANY_PROFILE]
    assert pins(f"{DOT} == '{profile}' && ({other})") != [ANY_PROFILE]
