"""Plugin subcommands: entry points in ``ragen_core.commands`` + the ``ragen_register_commands`` hook.

Each test installs throwaway distributions (dist-info folders on ``PYTHONPATH``) and runs the CLI
in a subprocess, as a user would.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ragen_core.testing import fake_entry_points

HELLO = '''\
from ragen_core import hookimpl


def run(args):
    print(f"hello {args.name}")
    return 0


@hookimpl
def ragen_register_commands(subparsers):
    parser = subparsers.add_parser("hello", help="say hello")
    parser.add_argument("--name", default="world")
    parser.set_defaults(func=run)
'''

RAISES = '''\
from ragen_core import hookimpl


@hookimpl
def ragen_register_commands(subparsers):
    raise RuntimeError("bad parser setup")
'''


def _install(tmp_path) -> dict[str, str]:
    """A working command plugin and three broken ones; returns the environment that sees them."""
    fake_entry_points(tmp_path, "fake-hello", {"ragen_core.commands": {"hello": "fakecmd_hello"}}, modules={"fakecmd_hello.py": HELLO},
                      add_to_path=False)
    fake_entry_points(tmp_path, "fake-missing", {"ragen_core.commands": {"missing": "fakecmd_not_there"}}, add_to_path=False)
    fake_entry_points(tmp_path, "fake-nohook", {"ragen_core.commands": {"nohook": "fakecmd_nohook"}},
                      modules={"fakecmd_nohook.py": "X = 1\n"}, add_to_path=False)
    fake_entry_points(tmp_path, "fake-raises", {"ragen_core.commands": {"raises": "fakecmd_raises"}}, modules={"fakecmd_raises.py": RAISES},
                      add_to_path=False)
    return dict(os.environ, PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def ragen(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``ragen ARGS``; returns the process and the ``fakecmd_*`` modules it imported."""
    code = ("import sys\nfrom ragen_core.cli.main import main\n"
            "try:\n    rc = main(sys.argv[1:])\nexcept SystemExit as e:\n    rc = e.code or 0\n"
            "print('IMPORTED', ','.join(sorted(m for m in sys.modules if m.startswith('fakecmd_'))))\nsys.exit(rc)\n")
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120)
    imported = done.stdout.strip().splitlines()[-1].removeprefix("IMPORTED").strip()
    return done, [m for m in imported.split(",") if m]


def test_help_lists_plugin_commands_from_metadata_and_runs_only_the_chosen_one(tmp_path):
    env = _install(tmp_path)
    out, imported = ragen(env, "--help")
    assert out.returncode == 0, out.stderr
    for name in ("hello", "missing", "nohook", "raises"):
        assert f"    {name} " in out.stdout, name
    assert "(fake-hello 0.0.1)" in out.stdout
    assert imported == []  # listed from entry-point metadata alone

    out, imported = ragen(env, "hello", "--name", "ragen")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "hello ragen"
    assert imported == ["fakecmd_hello"]  # only the chosen command's module

    out, imported = ragen(env, "plugins")
    assert out.returncode == 0 and imported == []
    rows = {tuple(line.split()[:5]) for line in out.stdout.splitlines()}
    assert ("command", "hello", "fake-hello", "0.0.1", "ok") in rows  # commands are listed too, from metadata
    out, _ = ragen(env, "plugins", "--kind", "command")
    assert out.returncode == 0 and out.stdout.splitlines()[1].split()[0] == "command"
    assert all(line.split()[0] == "command" for line in out.stdout.splitlines()[1:-1])  # (the last line is ragen()'s IMPORTED)


def test_broken_command_plugin_is_a_one_line_error_and_breaks_no_other_command(tmp_path):
    env = _install(tmp_path)
    for name, dist, why in [("missing", "fake-missing", "ModuleNotFoundError: No module named 'fakecmd_not_there'"),
                            ("nohook", "fake-nohook", "did not add the command 'nohook'"),
                            ("raises", "fake-raises", "RuntimeError: bad parser setup")]:
        out, _ = ragen(env, name)
        assert out.returncode == 2
        lines = out.stderr.strip().splitlines()
        assert lines[0].startswith(f"PluginLoadError: command {name!r} from {dist} 0.0.1 failed to load:"), lines[0]
        assert why in lines[0]
        assert all(line.startswith("hint: ") for line in lines[1:]) and f"RAGEN_DISABLE_PLUGINS={dist}" in lines[1]
        assert "Traceback" not in out.stderr
    # the broken ones stop only themselves
    out, _ = ragen(env, "hello")
    assert out.returncode == 0 and out.stdout.startswith("hello world")
    out, imported = ragen(env, "plugins")
    assert out.returncode == 0, out.stderr
    assert imported == []
    out, _ = ragen(dict(env, RAGEN_DISABLE_PLUGINS="fake-missing"), "--help")
    assert out.returncode == 0 and "    missing " not in out.stdout and "    hello " in out.stdout


def test_two_distributions_offering_one_command_name_is_an_error_naming_both(tmp_path):
    env = _install(tmp_path)
    fake_entry_points(tmp_path, "fake-hello-too", {"ragen_core.commands": {"hello": "fakecmd_hello"}}, add_to_path=False)
    fake_entry_points(tmp_path / "other", "fake-other", {"ragen_core.commands": {"hello": "fakecmd_other"}}, add_to_path=False)
    env["PYTHONPATH"] = str(tmp_path / "other") + os.pathsep + env["PYTHONPATH"]
    out, imported = ragen(env, "hello")
    assert out.returncode == 2 and imported == []
    first = out.stderr.splitlines()[0]
    assert first.startswith("DuplicatePluginError: command 'hello' is provided by 3 distributions:")
    assert "fake-hello 0.0.1" in first and "fake-other 0.0.1" in first


def test_diagnose_without_its_distribution_names_the_distribution_to_install():
    env = dict(os.environ, RAGEN_DISABLE_PLUGINS="ragen-diagnostics")
    out, _ = ragen(env, "diagnose", "runs/x")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines[0] == "PluginNotFoundError: 'ragen diagnose' comes with the ragen-diagnostics distribution, which is not installed (or is disabled)"
    assert lines[1].startswith("hint: pip install ragen-diagnostics")


def test_python_dash_m_ragen_core_is_the_ragen_command():
    """Where the ``ragen`` script is not on PATH (a second venv seeing this one's packages), ``python -m
    ragen_core`` is the same command: its output and exit status (there was no ``__main__``: 'No module named
    ragen_core.__main__')."""
    import subprocess
    import sys

    ok = subprocess.run([sys.executable, "-m", "ragen_core", "plugins", "show", "filter", "none"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("filter none")
    bad = subprocess.run([sys.executable, "-m", "ragen_core", "run", "--env", "no-such-env", "--print-config"], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "no-such-env" in bad.stderr


def test_run_help_says_where_the_settings_are_listed(capsys):
    """'ragen run --help' took dotted key=value overrides without saying where the keys are listed."""
    from ragen_core.cli.main import main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    epilog = capsys.readouterr().out.strip().split("\n\n")[-1]
    assert not epilog.startswith("options:")  # a paragraph after the options (which name --print-config without saying why)
    assert "--print-config" in epilog and "ragen plugins show env NAME" in epilog and "env_config.KEY" in epilog
