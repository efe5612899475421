"""The `requests-accelerators` matchCondition sends the pods an annotation-marked allocator may give a GPU.

KAI Scheduler hands its GPU shares only to pods of its scheduler (kai-scheduler/api constants/constants.go,
DefaultSchedulerName; resources.py's allocator table), with no accelerator resource: the condition
sends every pod spec of that scheduler, and the engine decides from the annotations.
"""

from __future__ import annotations

from typing import Any

from cel_expr_python import cel

from webhook.engine.resources import DEFAULT, Accelerators, Allocator
from webhook.engine.workloads import KINDS
from webhook.install.registration import requests_accelerators


def sends(table: Accelerators, obj: dict[str, Any]) -> bool:
    env = cel.NewEnv(variables={"object": cel.Type.DYN})
    program = env.compile(requests_accelerators(KINDS, table))
    return bool(program.eval(env.Activation({"object": obj})).value())


def pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c"}], **spec},
    }


def job(**spec: Any) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "c"}], **spec}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": template}}


def test_pods_and_templates_of_kais_scheduler_are_sent_other_cpu_pods_are_not() -> None:
    assert sends(DEFAULT, pod(schedulerName="kai-scheduler"))
    assert sends(DEFAULT, job(schedulerName="kai-scheduler"))
    assert not sends(DEFAULT, pod())
    assert not sends(DEFAULT, pod(schedulerName="default-scheduler"))


def test_an_allocator_of_any_scheduler_sends_everything() -> None:
    table = Accelerators.from_patterns(["nvidia.com/gpu"], allocators=[Allocator("any", ("example.com/share",))])
    assert requests_accelerators(KINDS, table) == "true"
    without = Accelerators.from_patterns(["nvidia.com/gpu"], allocators=[])
    assert not sends(without, pod(schedulerName="kai-scheduler"))
