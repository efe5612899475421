"""Lint that knows the params' types (spec.paramsSchema, else the defaults' types), params checked at load,
and suites' schema checked by lint as `test` checks it."""

from __future__ import annotations

import shutil

from tests.authoring.conftest import RULES
from tests.authoring.test_lint import lint_lines

AT_MOST = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: at-most}}
spec:
  action: Deny
  match: {{kinds: [Pod], operations: [CREATE], gpu: true}}
  validate:
    expression: "gpuCount(podSpec) <= params.max"
    message: too many
  params: {{max: {value}}}
{schema}"""


def test_a_string_param_compared_with_a_gpu_count_is_a_lint_error(cli, write):
    path = write("r.yaml", AT_MOST.format(value='"8"', schema=""))
    code, lines = lint_lines(cli, path)
    assert code == 1
    assert lines == [
        f"{path}:8:36: rule at-most: spec.validate.expression: CEL type error with the params' types "
        "(the types of spec.params): found no matching overload for '_<=_' applied to '(int, string)'"
    ]


def test_a_number_param_lints_clean_int_and_double_alike(cli, write):
    assert lint_lines(cli, write("a.yaml", AT_MOST.format(value="8", schema="")))[0] == 0
    assert lint_lines(cli, write("b/r.yaml", AT_MOST.format(value="8.5", schema="")))[0] == 0


def test_the_declared_schema_types_the_param_over_its_default(cli, write):
    schema = "  paramsSchema: {type: object, properties: {max: {type: string}}}"
    code, lines = lint_lines(cli, write("r.yaml", AT_MOST.format(value='"8"', schema=schema)))
    assert code == 1 and "(spec.paramsSchema): found no matching overload for '_<=_'" in lines[0]


def test_list_items_are_typed_inside_macros(cli, write):
    path = write(
        "r.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicy
        metadata: {name: names}
        spec:
          match: {kinds: [Pod]}
          validate:
            expression: "params.names.exists(n, n > 2)"
          params: {names: [a, b]}
        """,
    )
    code, lines = lint_lines(cli, path)
    assert code == 1 and "applied to '(string, int)'" in lines[0] and lines[0].startswith(f"{path}:7:43:")


def test_params_that_break_the_declared_schema_fail_the_load(cli, write):
    schema = "  paramsSchema: {type: object, properties: {max: {type: integer, minimum: 0}}}"
    path = write("r.yaml", AT_MOST.format(value="-1", schema=schema))
    code, lines = lint_lines(cli, path)
    assert code == 1
    assert lines == [
        f"{path}:10:17: rule at-most: spec.params.max: -1 is less than the minimum of 0 (spec.paramsSchema)"
    ]


def test_a_params_schema_outside_the_subset_is_refused(cli, write):
    schema = "  paramsSchema: {type: object, properties: {max: {type: integer, format: int32}}}"
    code, lines = lint_lines(cli, write("r.yaml", AT_MOST.format(value="1", schema=schema)))
    assert code == 1 and "spec.paramsSchema.properties.max: Additional properties are not allowed" in lines[0]


OVERLAY = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicyOverlay
metadata: {{name: site}}
spec:
  rules:
    - name: gpu-per-pod-ceiling
      params: {value}
"""


def test_a_site_overlay_of_the_wrong_type_fails_the_load_naming_the_param(cli, write, tmp_path):
    pack = tmp_path / "pack"
    shutil.copytree(RULES, pack, ignore=shutil.ignore_patterns("tests"))
    overlay = write("site/overlay.yaml", OVERLAY.format(value='{defaultCeiling: "8"}'))
    code, out, _ = cli("lint", str(pack), str(overlay.parent))
    assert code == 1
    assert (
        "spec.params.defaultCeiling: '8' is not of type 'integer' (spec.paramsSchema) (with GPUPolicyOverlay site (params.defaultCeiling))"
        in out
    )
    overlay.write_text(OVERLAY.format(value="{counts: wholeGPUs}"))
    code, out, _ = cli("lint", str(pack), str(overlay.parent))
    assert code == 1 and "spec.params.counts: 'wholeGPUs' is not one of ['devices', 'wholeGpus']" in out
    overlay.write_text(OVERLAY.format(value="{defaultCeiling: 4, counts: wholeGpus}"))
    assert cli("lint", str(pack), str(overlay.parent))[0] == 0


def test_without_a_schema_an_overlay_keeps_the_defaults_types(cli, write, tmp_path):
    write("rules/r.yaml", AT_MOST.format(value="8", schema=""))
    overlay = write("rules/site.yaml", OVERLAY.replace("gpu-per-pod-ceiling", "at-most").format(value='{max: "9"}'))
    code, out, _ = cli("lint", str(overlay.parent))
    assert code == 1
    assert "spec.params.max: '9' is not of type 'number' (the type of the shipped default)" in out


def test_lint_checks_a_suites_schema_as_test_does(cli, write):
    suite = write(
        "tests/r.test.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicyTest
        metadata: {name: t}
        spec:
          cases:
            - name: x
              object: {apiVersion: v1, kind: Pod, metadata: {name: p}}
              expect: {result: deny}
        """,
    )
    write("r.yaml", AT_MOST.format(value="8", schema=""))
    code, lines = lint_lines(cli, suite.parent.parent)
    assert code == 1
    assert lines == [
        f"{suite}:8:15: spec/cases/0/expect: Additional properties are not allowed ('result' was unexpected)"
    ]
    assert cli("test", str(suite.parent.parent))[0] != 0  # what test refuses, lint reports
