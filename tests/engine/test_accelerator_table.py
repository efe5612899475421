"""The accelerator table: DRA extended resources, share and slice resources, and MIG profiles pinned by selectors.

Sources: KEP-5004 (`deviceclass.resource.kubernetes.io/<class>`, DRAExtendedResource); volcano-sh/volcano
pkg/scheduler/api (volcano.sh/gpu-number, gpu-memory, vgpu-*); Project-HAMi/HAMi (nvidia.com/gpumem,
gpucores); NVIDIA/k8s-dra-driver-gpu deviceinfo.go (the MIG device attribute `profile`).
"""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine.resources import ANY_PROFILE, DEFAULT, Accelerators, PodClaims, pinned_profiles


def container(**limits: Any) -> dict[str, Any]:
    return {"name": "c", "resources": {"limits": dict(limits)}}


def limits(pairs: dict[str, str]) -> dict[str, Any]:
    return {"name": "c", "resources": {"limits": pairs}}


def test_a_dra_extended_resource_of_an_accelerator_class_counts_its_devices() -> None:
    assert DEFAULT.container_count(limits({"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "3"})) == 3
    assert DEFAULT.container_count(limits({"deviceclass.resource.kubernetes.io/mig.nvidia.com": "2"})) == 2
    # a class that hands out NICs or CPUs is no accelerator
    assert DEFAULT.container_count(limits({"deviceclass.resource.kubernetes.io/dranet-ib": "4"})) == 0
    assert "deviceclass.resource.kubernetes.io/compute-domain-default-channel.nvidia.com" not in DEFAULT


def test_configured_device_classes_give_their_extended_resource_names() -> None:
    table = Accelerators.from_patterns(["example.com/tpu"], ["tpu.example.com", "a100-*"])
    assert table.container_count(limits({"deviceclass.resource.kubernetes.io/tpu.example.com": "2"})) == 2
    assert table.container_count(limits({"deviceclass.resource.kubernetes.io/a100-80gb": "1"})) == 1
    assert table.container_count(limits({"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"})) == 0


def test_share_resources_are_one_device_alone_and_nothing_beside_a_device_count() -> None:
    assert DEFAULT.container_count(limits({"volcano.sh/gpu-memory": "4096"})) == 1
    assert DEFAULT.container_count(limits({"nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"})) == 1
    assert DEFAULT.container_count(limits({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "40000"})) == 2
    assert DEFAULT.container_count(limits({"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "1024"})) == 2
    assert DEFAULT.container_count(limits({"volcano.sh/gpu-memory": "0"})) == 1  # by name, as export tests it
    assert "nvidia.com/gpumem" in DEFAULT  # an accelerator resource: isAccelerator, the registration's condition


def test_whole_gpus_leave_slices_replicas_vgpus_and_shares_out() -> None:
    mixed = limits({"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "3", "nvidia.com/gpu.shared": "2"})
    assert DEFAULT.container_count(mixed) == 6
    assert DEFAULT.container_count(mixed, whole_only=True) == 1
    assert DEFAULT.container_count(limits({"volcano.sh/gpu-memory": "1024"}), whole_only=True) == 0
    assert DEFAULT.container_count(limits({"volcano.sh/gpu-number": "2"}), whole_only=True) == 2
    ext = limits({"deviceclass.resource.kubernetes.io/mig.nvidia.com": "4"})
    assert (DEFAULT.container_count(ext), DEFAULT.container_count(ext, whole_only=True)) == (4, 0)


def test_whole_gpus_leave_dra_devices_of_mig_classes_out() -> None:
    spec = {
        "devices": {
            "requests": [
                {"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com", "count": 3}},
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}},
            ]
        }
    }
    claims = PodClaims((DEFAULT.claim_summary("c", "ResourceClaim", "c", spec),))
    pod = {"containers": [{"name": "c", "resources": {"claims": [{"name": "c"}]}}]}
    assert DEFAULT.pod_count(pod, claims) == 5
    assert DEFAULT.pod_count(pod, claims, whole_only=True) == 2


PROFILE = "device.attributes['gpu.nvidia.com'].profile"


@pytest.mark.parametrize(
    ("expressions", "pinned"),
    [
        ([f"{PROFILE} == '1g.10gb'"], ["1g.10gb"]),
        (
            [
                f"device.driver == 'gpu.nvidia.com' && {PROFILE} == '2g.20gb' && device.attributes['gpu.nvidia.com'].type == 'mig'"
            ],
            ["2g.20gb"],
        ),
        ([f"'3g.40gb' == {PROFILE}"], ["3g.40gb"]),
        (['device.attributes["gpu.nvidia.com"][\'profile\'] == "1g.10gb"'], ["1g.10gb"]),
        ([f"{PROFILE} in ['1g.10gb', '2g.20gb']"], ["1g.10gb", "2g.20gb"]),
        ([f"{PROFILE} in ['1g.10gb', '7g.80gb']", f"{PROFILE} == '1g.10gb'"], ["1g.10gb"]),  # both hold
        ([f"{PROFILE} == '1g.10gb' && {PROFILE} == '7g.80gb'"], []),  # nothing fits both
        # what pins nothing: a tenant's ways around
        ([], [ANY_PROFILE]),
        ([f"{PROFILE} != '7g.80gb'"], [ANY_PROFILE]),
        ([f"{PROFILE} == '1g.10gb' || true"], [ANY_PROFILE]),
        ([f"({PROFILE} == '1g.10gb' || true)"], [ANY_PROFILE]),
        ([f"true ? {PROFILE} == '1g.10gb' : true"], [ANY_PROFILE]),
        ([f"!({PROFILE} == '7g.80gb')"], [ANY_PROFILE]),
        ([f"{PROFILE} == '1g.10gb' == false"], [ANY_PROFILE]),
        ([f"{PROFILE}.startsWith('1g')"], [ANY_PROFILE]),
        ([f"{PROFILE} == '1g.' + '10gb'"], [ANY_PROFILE]),
        ([f"{PROFILE} == '1g.10gb\\x00'"], [ANY_PROFILE]),  # escapes: not read
        (["device.attributes['example.com'].profile == '1g.10gb'"], [ANY_PROFILE]),  # another domain
        (["device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('10Gi')) >= 0"], [ANY_PROFILE]),
        ([f"x == 'a && {PROFILE} == ' && true"], [ANY_PROFILE]),  # a literal holding the text
        (["device.attributes['gpu.nvidia.com'].profile == '1g.10gb"], [ANY_PROFILE]),  # unterminated
    ],
)
def test_selectors_pin_a_profile_only_through_a_top_level_conjunct(expressions: list[str], pinned: list[str]) -> None:
    assert pinned_profiles([{"cel": {"expression": e}} for e in expressions]) == pinned


def test_claim_summaries_list_the_profiles_of_every_alternative() -> None:
    spec = {
        "devices": {
            "requests": [
                {
                    "name": "mig",
                    "firstAvailable": [
                        {
                            "name": "a",
                            "deviceClassName": "mig.nvidia.com",
                            "selectors": [{"cel": {"expression": f"{PROFILE} == '1g.10gb'"}}],
                        },
                        {"name": "b", "deviceClassName": "mig.nvidia.com"},
                    ],
                }
            ]
        }
    }
    summary = DEFAULT.claim_summary("c", "ResourceClaim", "c", spec)
    assert summary["selections"] == [
        {"deviceClass": "mig.nvidia.com", "profiles": ["1g.10gb"]},
        {"deviceClass": "mig.nvidia.com", "profiles": [ANY_PROFILE]},
    ]
