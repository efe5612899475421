"""The HTML report opened in headless Chromium: it renders, offline, and shows the summary."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.audit.conftest import EXTRA_RULES, RULES, WORKLOADS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_html_report_renders_in_headless_chromium(run, tmp_path):
    _, html, _ = run(WORKLOADS, "--rules", RULES, "--rules", EXTRA_RULES, "-o", "html")
    page = tmp_path / "report.html"
    page.write_text(html)
    screenshot = tmp_path / "report.png"
    profile = tmp_path / "profile"
    base = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--window-size=1280,900"]
    subprocess.run([*base, f"--screenshot={screenshot}", page.as_uri()], capture_output=True, timeout=60, check=True)
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=60, check=True)
    assert screenshot.stat().st_size > 10_000  # a real rendering, not a blank page
    text = dom.stdout
    assert "gpu-webhook audit report" in text
    assert "Objects audited" in text and "Findings by rule" in text
    assert "gpu-requests-equal-limits" in text and "no-visible-devices-without-gpu" in text
    assert text.count("<tr>") == 1 + 6  # header row and one per finding


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_patches_render_as_collapsed_diffs_and_missing_context_is_folded(run, tmp_path):
    from tests.audit.conftest import NS_RULES

    _, html, _ = run(WORKLOADS, "--rules", RULES, "--rules", NS_RULES, "-o", "html", "-n", "team-x")
    page = tmp_path / "report.html"
    page.write_text(html)
    profile = tmp_path / "profile"
    base = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--window-size=1280,900"]
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=60, check=True)
    text = dom.stdout
    patched = text.count("<details>")
    assert patched >= 1 and "<details open" not in text  # collapsed until clicked
    assert text.count('<pre class="diff">') == patched and '<span class="add">+' in text
    assert "--- submitted" in text and "+++ after mutation" in text
    # rules without namespace context: one section, each rule once, no row per object
    assert text.count('id="not-evaluated"') == 1 and "no Namespace object for team-a, team-b" in text
    assert 'class="r-skip"' not in text
