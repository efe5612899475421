"""Each lint error class: a broken rule file and the exact file:line:column message."""

from __future__ import annotations

from tests.authoring.conftest import RULES


def lint_lines(cli, path) -> tuple[int, list[str]]:
    """The problems lint reports, without their source excerpts nor the one line of a clean run."""
    code, out, _ = cli("lint", str(path))
    return code, [line for line in out.splitlines() if not line.startswith(" | ") and not line.endswith("no problems")]


def test_default_pack_is_clean(cli, pack):
    # one line on stdout, so a clean run is told from one that checked nothing
    files = len(list(RULES.glob("*.yaml")))
    assert cli("lint", str(RULES)) == (0, f"{len(pack.rules)} rules in {files} files: no problems\n", "")


def test_unknown_field_with_suggestion(cli, write):
    path = write(
        "r.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicy
        metadata: {name: typo}
        spec:
          match: {kinds: [Pod]}
          validat: {expression: "true"}
        """,
    )
    code, lines = lint_lines(cli, path)
    assert code == 1
    assert lines == [
        f"{path}:5:3: rule typo: spec: a rule needs `validate`, `mutate` or both",
        f"{path}:6:3: rule typo: unknown field 'spec.validat' (did you mean 'validate'?)",
    ]


def test_bad_enum_and_missing_field(cli, write):
    path = write(
        "r.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicy
        metadata: {name: enum}
        spec:
          action: Reject
          match: {operations: [CREATE]}
          validate: {expression: "true"}
        """,
    )
    code, lines = lint_lines(cli, path)
    assert code == 1
    assert lines == [
        f"{path}:5:11: rule enum: spec.action: 'Reject' is not one of: Deny, Warn, Audit",
        f"{path}:6:10: rule enum: spec.match: 'kinds' is a required field",
    ]


def test_duplicate_rule_names_across_files(cli, write, tmp_path):
    rule = """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicy
        metadata: {name: twice}
        spec:
          match: {kinds: [Pod]}
          validate: {expression: "true"}
        """
    first = write("a.yaml", rule)
    second = write("b.yaml", rule)
    code, lines = lint_lines(cli, tmp_path)
    assert code == 1
    assert lines == [f"{second}:1:1: rule twice: duplicate rule name (first defined at {first}:1:1)"]


def test_duplicate_yaml_key(cli, write):
    path = write(
        "r.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicy
        metadata: {name: dup}
        spec:
          match: {kinds: [Pod]}
          validate: {expression: "true"}
          validate: {expression: "false"}
        """,
    )
    code, lines = lint_lines(cli, path)
    assert code == 1
    assert lines == [f"{path}:7:3: duplicate key 'validate'"]


def test_cel_syntax_error_in_a_folded_block(cli, write):
    path = write(
        "r.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicy
        metadata: {name: syntax}
        spec:
          match: {kinds: [Pod]}
          validate:
            expression: >-
              containers.all(c,
                c.name ==)
        """,
    )
    code, out, _ = cli("lint", str(path))
    assert code == 1
    assert out.splitlines()[0].startswith(f"{path}:9:18: rule syntax: spec.validate.expression: CEL: Syntax error:")
    assert out.splitlines()[1:] == [" |   c.name ==)", " | ...........^"]


def test_cel_type_error(cli, write):
    path = write(
        "r.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicy
        metadata: {name: types}
        spec:
          match: {kinds: [Pod]}
          validate:
            expression: "gpuCount(podSpec) > 'two'"
        """,
    )
    code, lines = lint_lines(cli, path)
    assert code == 1
    assert lines == [
        f"{path}:7:36: rule types: spec.validate.expression: CEL: found no matching overload for '_>_' "
        "applied to '(int, string)'"
    ]


def test_cel_result_type_error(cli, write):
    path = write(
        "r.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicy
        metadata: {name: result}
        spec:
          match:
            kinds: [Pod]
            condition: gpuCount(podSpec) * 2
          validate:
            expression: "true"
            messageExpression: gpuCount(podSpec)
        """,
    )
    code, lines = lint_lines(cli, path)
    assert code == 1
    assert lines == [
        f"{path}:7:16: rule result: spec.match.condition: CEL type error: the expression gives INT, expected BOOL",
        f"{path}:10:24: rule result: spec.validate.messageExpression: CEL type error: the expression gives INT, "
        "expected STRING",
    ]


def test_fields_pods_do_not_have(cli, write):
    path = write(
        "r.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicy
        metadata: {name: fields}
        spec:
          match: {kinds: [Pod]}
          validate:
            expression: >-
              has(podSpec.containerz) ||
              containers.exists(c, c.resources.limit.size() > 0 && c.env.exists(e, e.nmae == 'A'))
        """,
    )
    code, lines = lint_lines(cli, path)
    assert code == 1
    assert lines == [
        f"{path}:8:19: rule fields: spec.validate.expression: PodSpec has no field 'containerz' "
        "(did you mean 'containers'?)",
        f"{path}:9:40: rule fields: spec.validate.expression: ResourceRequirements has no field 'limit' "
        "(did you mean 'limits'?)",
        f"{path}:9:78: rule fields: spec.validate.expression: EnvVar has no field 'nmae' (did you mean 'name'?)",
    ]


def test_object_spec_in_an_autogen_rule(cli, write):
    path = write(
        "r.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicy
        metadata: {name: autogen}
        spec:
          match: {kinds: [Pod]}
          validate:
            expression: "object.spec.containers.all(c, c.name != '')"
        """,
    )
    code, lines = lint_lines(cli, path)
    assert code == 1
    assert lines == [
        f"{path}:7:30: rule autogen: spec.validate.expression: `object.spec.containers`: this Pod rule also "
        "applies to pod templates (autogen), where `object` is the workload (a Deployment has no "
        "spec.containers); use `podSpec.containers`"
    ]
    # the same expression is right when the rule sees Pods only
    path.write_text(path.read_text().replace("kinds: [Pod]}", "kinds: [Pod]}\n  autogen: false"))
    assert lint_lines(cli, path) == (0, [])


def test_mutation_that_the_pack_denies(cli, write):
    path = write(
        "r.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicy
        metadata: {name: default-scheduler}
        spec:
          match: {kinds: [Pod], gpu: true}
          mutate:
            - setSchedulerName: {value: gpu-scheduler}
        ---
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicy
        metadata: {name: known-schedulers}
        spec:
          match: {kinds: [Pod]}
          validate:
            expression: "!has(podSpec.schedulerName) || podSpec.schedulerName in ['default-scheduler', 'volcano']"
            message: unknown scheduler
        """,
    )
    code, lines = lint_lines(cli, path)
    assert code == 1
    assert lines == [
        f"{path}:6:3: rule default-scheduler: spec.mutate: the mutated object is denied by rule known-schedulers "
        "of the same pack (on a GPU pod: unknown scheduler)"
    ]


def test_every_error_of_every_file_in_one_run(cli, write, tmp_path):
    write(
        "a.yaml",
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: a}\nspec: {match: {kinds: [Pod]}, validate: {expression: 'podSpec.nope'}}\n",
    )
    write(
        "b.yaml",
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: b}\nspec: {match: {kinds: [Pod]}, mutate: [{addTolerations: {}}]}\n",
    )
    write("c.yaml", "key: [unclosed\n")
    code, lines = lint_lines(cli, tmp_path)
    assert code == 1
    assert [line.split(": ", 1)[0].rsplit("/", 1)[1] for line in lines] == ["a.yaml:4:63", "b.yaml:4:41", "c.yaml:2:1"]


def test_exit_codes(cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: x}\nspec: {}\n")
    code, out, err = cli("lint", str(bad))
    assert (code, err) == (1, "2 errors\n")
    assert out.splitlines() == [
        f"{bad}:4:7: rule x: spec: 'match' is a required field",
        f"{bad}:4:7: rule x: spec: a rule needs `validate`, `mutate` or both",
    ]
    code, _, err = cli("lint", str(tmp_path / "missing"))
    assert code == 2 and "rules path not found" in err


def test_params_references_are_checked_against_the_rules_params(cli, write):
    path = write(
        "taint.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicy
        metadata: {name: taint-check}
        spec:
          action: Deny
          params: {taintKey: nvidia.com/gpu, effects: [NoSchedule]}
          match: {kinds: [Pod], operations: [CREATE]}
          validate:
            expression: >-
              !has(object.spec.tolerations) ||
              object.spec.tolerations.all(t, t.key != params.taintkey || t.effect in params['effects'])
            messageExpression: "'missing ' + params['taint_key']"
        """,
    )
    code, out, _ = cli("lint", str(path))
    assert code == 1
    assert (
        "rule taint-check: spec.validate.expression: params.taintkey is not a param of this rule "
        "(its params: effects, taintKey); did you mean params.taintKey?"
    ) in out
    assert "spec.validate.messageExpression: params.taint_key is not a param" in out
    assert "params.effects" not in out  # defined: no complaint
    assert out.count("is not a param") == 2


def test_a_file_edited_between_two_lints_in_one_process_is_read_as_it_is_now(cli, write):
    """lint keeps each file's parse while its text is the same (the server's /policies check lints the
    pack at every apply in one long-lived process): an edit is seen at the next lint, and undoing it too."""
    good = """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicy
        metadata: {name: edited}
        spec:
          match: {kinds: [Pod]}
          validate: {expression: "true"}
        """
    path = write("r.yaml", good)
    assert lint_lines(cli, path) == (0, [])
    # a problem only lint's own pass over the documents finds (the loader takes the rule)
    write("r.yaml", good.replace('"true"', "\"podMetadata.annotations['a'].split(',').size() < 3\""))
    code, lines = lint_lines(cli, path)
    assert code == 1 and any("split() on an annotation" in line for line in lines), lines
    write("r.yaml", good)
    assert lint_lines(cli, path) == (0, [])
