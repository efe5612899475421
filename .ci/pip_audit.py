"""Dependency audit for CI: pip-audit over the installed environment, honest about what it checked.

pip-audit reports "No known vulnerabilities found" even when it could audit nothing (its
vulnerability service unreachable, every package skipped). This wrapper counts what was
really audited and says UNVERIFIED when packages were skipped, so a silent pass cannot
happen. Known vulnerabilities fail the step unless listed, with a reason, in
.ci/pip-audit-ignore.txt (one `ID  # reason` per line).

Exit codes: 0 audited and clean (or unverified without --strict); 1 vulnerabilities;
3 unverified with --strict (or pip-audit itself failed).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

IGNORE_FILE = Path(__file__).with_name("pip-audit-ignore.txt")


def ignored() -> list[str]:
    ids = []
    for line in IGNORE_FILE.read_text().splitlines():
        entry, _, reason = line.partition("#")
        if entry.strip():
            if not reason.strip():
                sys.exit(f"pip-audit: {IGNORE_FILE.name}: {entry.strip()} has no reason; say why it is safe")
            ids.append(entry.strip())
    return ids


def main(strict: bool) -> int:
    command = [
        sys.executable, "-m", "pip_audit", "--vulnerability-service", "pypi", "--skip-editable",
        "--progress-spinner", "off", "--format", "json",
    ]  # fmt: skip
    for vuln in ignored():
        command += ["--ignore-vuln", vuln]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        print(f"pip-audit: FAILED to run (exit {done.returncode}):\n{done.stderr[-2000:]}")
        return 3
    dependencies = report.get("dependencies", [])
    skipped = [d for d in dependencies if d.get("skip_reason")]
    vulnerable = [d for d in dependencies if d.get("vulns")]
    audited = len(dependencies) - len(skipped)
    for dependency in vulnerable:
        for vuln in dependency["vulns"]:
            fixes = ", ".join(vuln.get("fix_versions") or []) or "no fix yet"
            print(f"pip-audit: {dependency['name']} {dependency['version']}: {vuln['id']} (fixed in {fixes})")
    if vulnerable:
        print(f"pip-audit: {len(vulnerable)} vulnerable dependencies; upgrade, or justify in {IGNORE_FILE.name}")
        return 1
    if skipped:
        print(
            f"pip-audit: UNVERIFIED - {len(skipped)} of {len(dependencies)} dependencies could not be audited "
            f"(first: {skipped[0]['skip_reason']}). The PyPI vulnerability API is probably not reachable "
            f"from here; no claim is made about them."
        )
        return 3 if strict else 0
    print(f"pip-audit: {audited} dependencies audited, no known vulnerabilities")
    return 0


if __name__ == "__main__":
    sys.exit(main(strict="--strict" in sys.argv[1:]))
