"""`containerGpuCount(c)` is rewritten to look at `c.resources` only: same answers as the Python helper."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine.cel import CelEnvironment
from webhook.engine.resources import DEFAULT

CONTAINERS: list[dict[str, Any]] = [
    {"name": "none"},
    {"name": "empty", "resources": {}},
    {"name": "cpu", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}},
    {"name": "both", "resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}},
    {"name": "limit-only", "resources": {"limits": {"nvidia.com/gpu": 4}}},
    {"name": "mig", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1", "amd.com/gpu": "1"}}},
    {"name": "env", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], "resources": {"limits": {}}},
]


@pytest.fixture(scope="module")
def env() -> CelEnvironment:
    return CelEnvironment(DEFAULT)


def test_rewritten_call_agrees_with_the_python_helper(env: CelEnvironment) -> None:
    expression = env.compile("containers.map(c, containerGpuCount(c))")
    assert "resourcesGpuCount" not in expression.text  # the rule author's text is kept for messages
    activation = env.activation({"containers": CONTAINERS})
    assert expression.evaluate(activation) == [DEFAULT.container_count(c) for c in CONTAINERS] == [0, 0, 0, 2, 4, 2, 0]


def test_calls_on_other_expressions_still_use_the_whole_container(env: CelEnvironment) -> None:
    expression = env.compile("containerGpuCount(containers[3]) + containerGpuCount( c2 )".replace("c2", "containers[4]"))
    assert expression.evaluate(env.activation({"containers": CONTAINERS})) == 6
