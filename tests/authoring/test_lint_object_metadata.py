"""Lint and object.metadata (issue 29): checked whatever `object` is, and its labels in an autogen'd Pod rule."""

from __future__ import annotations


def lint_lines(cli, path) -> tuple[int, list[str]]:
    code, out, _ = cli("lint", str(path))
    return code, [
        line for line in out.splitlines() if not line.startswith(" | ") and not line.endswith(": no problems")
    ]


def test_object_metadata_in_an_autogen_rule(cli, write):
    """Issue 29: with autogen on, a typo in object.metadata linted clean and then denied every GPU pod;
    and object.metadata.labels, the workload's on a template, gets a pointer to podMetadata."""
    path = write(
        "r.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicy
        metadata: {name: labels}
        spec:
          match: {kinds: [Pod]}
          validate:
            expression: "has(object.metadata.lables)"
        """,
    )
    code, lines = lint_lines(cli, path)
    assert code == 1
    assert lines == [
        f"{path}:7:38: rule labels: spec.validate.expression: ObjectMeta has no field 'lables' (did you mean 'labels'?)"
    ]
    path.write_text(path.read_text().replace("lables", "labels"))
    code, lines = lint_lines(cli, path)
    assert code == 1 and len(lines) == 1
    assert "`object.metadata.labels`: this Pod rule also applies to pod templates (autogen)" in lines[0]
    assert "use `podMetadata.labels`" in lines[0]
    path.write_text(path.read_text().replace("object.metadata", "podMetadata"))
    code, lines = lint_lines(cli, path)
    assert code == 0 and not any("podMetadata" in line or "ObjectMeta" in line for line in lines)
