"""The command line imports only the command it runs, and a missing or broken command module is a clear error."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from webhook import cli


def test_a_missing_command_module_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, "vanished"))
    for argv in (["vanished"], ["--help"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert "the `vanished` command cannot be loaded" in err
        assert "No module named 'webhook.commands.vanished'" in err
        assert "reinstall gpu-webhook" in err and "Traceback" not in err
    # a command that does not need the missing module still runs
    with pytest.raises(SystemExit) as done:
        cli.main(["lint", "--help"])
    assert done.value.code == 0


def test_a_broken_command_module_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    broken = types.ModuleType("webhook.commands.broken")  # imports, but has no register()
    monkeypatch.setitem(sys.modules, "webhook.commands.broken", broken)
    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, "broken"))
    assert cli.main(["broken"]) == 2
    assert (
        "the `broken` command cannot be loaded (webhook.commands.broken has no register())" in capsys.readouterr().err
    )

    def failing(name: str, *args: object, **kwargs: object) -> object:
        if name == "webhook.commands.audit":
            raise ImportError("cannot import name 'Tally' from 'webhook.audit'")
        return real(name, *args, **kwargs)

    real = cli.importlib.import_module
    monkeypatch.setattr(cli.importlib, "import_module", failing)
    assert cli.main(["audit", "x.yaml"]) == 2
    err = capsys.readouterr().err
    assert "the `audit` command cannot be loaded (webhook.commands.audit: ImportError: cannot import name" in err


def test_audit_does_not_import_the_server_or_the_exporter() -> None:
    code = (
        "import sys\n"
        "from webhook import cli\n"
        "try:\n"
        "    cli.main(['audit', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = [m for m in ('webhook.server.app', 'aiohttp', 'webhook.export', 'cryptography', 'importlib.metadata')\n"
        "          if m in sys.modules]\n"
        "print(','.join(loaded), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stderr.strip() == "", done.stderr


def test_version_and_help_still_list_everything(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out.startswith("gpu-webhook ")
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in cli.COMMANDS)
    assert "render the install manifests" in out  # each command's own help, so its module was loaded
