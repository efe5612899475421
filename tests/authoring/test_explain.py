"""`gpu-webhook explain`: every rule is accounted for, with its reason, results and patch operations."""

from __future__ import annotations

import os
import shutil
import sys
import threading

import pytest
import yaml

from tests.authoring.conftest import BASIC_RULES, RULES
from webhook.cli import main
from webhook.kubeyaml import plain_document

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train", "namespace": "team-a"},
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "cuda:12",
                "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}},
            },
            {"name": "side", "image": "busybox", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
        ]
    },
}
TEAM_LABEL = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: team-label}
spec:
  match: {kinds: [Pod], operations: [CREATE]}
  mutate:
    - setLabels: {valueExpressions: {team: "namespaceObject.metadata.labels.team"}}
"""


def test_two_denials_and_three_patches_are_all_named(cli, tmp_path):
    # the layout of explain, with exact counts: pinned to the small rule set, not the growing pack
    rules = tmp_path / "rules"
    shutil.copytree(BASIC_RULES, rules)
    (rules / "team-label.yaml").write_text(TEAM_LABEL)
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(POD))
    namespace = tmp_path / "ns.yaml"
    namespace.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a, labels: {team: ml}}\n")
    code, out, _ = cli("explain", "-f", str(pod), "--namespace-objects", str(namespace), "--rules", str(rules))
    assert code == 1
    assert "\x1b[" not in out  # no colour off a terminal
    decision = out[out.index("Decision:") :]
    assert "Decision: DENIED (2 violations)" in decision
    assert "deny [gpu-requests-equal-limits] pod train: container main requests nvidia.com/gpu 1" in decision
    assert "deny [no-visible-devices-without-gpu] pod train: container side sets NVIDIA_VISIBLE_DEVICES" in decision
    patch = out[out.index("Patch (") : out.index("Mutated object")]
    assert patch.splitlines()[0] == "Patch (3 operations)"
    assert '  [gpu-node-affinity] add /spec/affinity {"nodeAffinity": ' in patch
    assert '  [gpu-toleration] add /spec/tolerations [{"key": "nvidia.com/gpu", ' in patch
    assert '  [team-label] add /metadata/labels {"team": "ml"}' in patch
    # each rule's own section, with the reason of the one that did not match
    assert "  cpu-pods-off-gpu-nodes (validate, Deny)" in out
    assert "    pod train: not matched: requests accelerators (gpu: false)" in out
    assert "    pod train: matched, DENY: pod train: container main requests" in out
    assert out.count("    pod train: matched, mutated") == 3
    diff = out[out.index("Mutated object") :].splitlines()
    assert diff[1:3] == ["--- train (original)", "+++ train (mutated)"]
    assert "+    team: ml" in diff and "+  - key: nvidia.com/gpu" in diff


def test_update_and_rules_that_leave_the_object_out(cli, tmp_path):
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump({**POD, "spec": {"containers": [{"name": "main", "image": "cuda:12"}]}}))
    code, out, _ = cli("explain", "-f", str(pod), "--operation", "UPDATE", "--old", str(pod), "--color")
    assert code == 0
    assert "\x1b[1;32mDecision: allowed\x1b[0m" in out
    assert "operation UPDATE is not in match.operations (CREATE)" in out  # gpu-toleration
    assert "Patch (" not in out


def test_update_needs_the_old_object(cli, tmp_path):
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(POD))
    code, _, err = cli("explain", "-f", str(pod), "--operation", "UPDATE")
    assert code == 2 and "--operation UPDATE needs --old FILE" in err


def test_kind_outside_the_rules(cli, tmp_path):
    service = tmp_path / "svc.yaml"
    service.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {}\n")
    code, out, _ = cli("explain", "-f", str(service), "--no-color", "--rules", str(BASIC_RULES))
    assert code == 0
    assert out.count("not matched: kind Service is not in match.kinds (Pod)") == 5


def test_every_rule_of_the_pack_is_accounted_for(cli, tmp_path):
    # the default pack (explain's default rules): each rule has its own section with the reason
    service = tmp_path / "svc.yaml"
    service.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {}\n")
    code, out, _ = cli("explain", "-f", str(service), "--no-color", "--rules", str(RULES))
    assert code == 0
    names = sorted(plain_document(p.read_text())["metadata"]["name"] for p in RULES.glob("*.yaml"))
    assert out.splitlines()[0] == f"Service default/web (CREATE), {len(names)} rules"
    for name in names:
        section = out[out.index(f"\n  {name} (") :].split("\n", 3)[2]
        assert section.startswith("    not matched: kind Service is not in match.kinds ("), (name, section)



def on_a_terminal(*argv: str) -> str:
    """`gpu-webhook ARGV` with stdout a pseudo-terminal, as a person at a shell runs it; what it wrote."""
    controller, terminal = os.openpty()
    received = bytearray()

    def read() -> None:  # drain the terminal while the command writes: its buffer is small
        try:
            while chunk := os.read(controller, 65536):
                received.extend(chunk)
        except OSError:  # EIO: the command's side is closed
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    stdout = sys.stdout
    with open(terminal, "w", encoding="utf-8", closefd=True) as tty:
        sys.stdout = tty
        try:
            main(list(argv))
        finally:
            sys.stdout = stdout
    reader.join(5)
    os.close(controller)
    return received.decode().replace("\r\n", "\n")


@pytest.fixture
def denied_pod(tmp_path, monkeypatch):
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(POD))
    return ["explain", "-f", str(pod), "--rules", str(BASIC_RULES)]


def test_colour_on_a_terminal(denied_pod):
    out = on_a_terminal(*denied_pod)
    assert "\x1b[1;31mDecision: DENIED (2 violations)\x1b[0m" in out
    assert "\x1b[31mdeny\x1b[0m [gpu-requests-equal-limits]" in out


def test_no_colour_on_a_terminal_with_no_color(denied_pod, monkeypatch):
    assert "\x1b[" not in on_a_terminal(*denied_pod, "--no-color")
    monkeypatch.setenv("NO_COLOR", "1")  # https://no-color.org
    out = on_a_terminal(*denied_pod)
    assert "\x1b[" not in out and "Decision: DENIED (2 violations)" in out
