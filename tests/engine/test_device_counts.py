"""How one DRA request's device count and one extended-resource quantity are read, on odd values a tenant
may write (resource.k8s.io/v1 DeviceRequest: `count` defaults to 1, `allocationMode: All` takes every
matching device; a quantity is a resource.Quantity or a plain number)."""

from __future__ import annotations

import pytest

from webhook.engine.resources import _device_count, whole_quantity


@pytest.mark.parametrize(
    ("request_", "count"),
    [
        ({}, 1),
        ({"count": 3}, 3),
        ({"count": 1}, 1),
        ({"count": 0}, 1),
        ({"count": -3}, 1),
        ({"count": "2"}, 1),
        ({"count": True}, 1),
        ({"count": 2.0}, 1),
        ({"allocationMode": "All", "count": 5}, 1),
        ({"allocationMode": "ExactCount", "count": 5}, 5),
    ],
)
def test_a_requests_device_count(request_: dict, count: int) -> None:
    found = _device_count(request_)
    assert found == count and type(found) is int


@pytest.mark.parametrize(
    ("value", "whole"),
    [
        (8, 8),
        (1, 1),
        (0, 0),
        (-2, 0),
        ("2", 2),
        ("0", 0),
        ("-1", 0),
        ("1500m", 1),
        ("1k", 1000),
        (2.5, 2),
        ("x", 0),
        (None, 0),
        (True, 0),  # a boolean is no quantity
        (10**40, 0),
    ],
)
def test_a_whole_quantity(value: object, whole: int) -> None:
    assert whole_quantity(value) == whole
