"""The ``ragen`` CLI's spine commands, run as a user would (subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ragen_core.interfaces.algorithm import Algorithm, PolicyLossOutputs
from ragen_core.specs import AlgorithmSpec
from ragen_core.testing import fake_entry_points

HEAVY = ("torch", "transformers", "vllm", "ray")


def ragen(*args: str, env: dict[str, str] | None = None, stdin: str = "", cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(
        [sys.executable, "-c", "import sys; from ragen_core.cli.main import main; sys.exit(main())", *args],
        capture_output=True, text=True, env=full_env, input=stdin, timeout=300, cwd=cwd,
    )


def test_plugins_lists_without_heavy_imports():
    code = (
        "import sys, io, contextlib\n"
        "from ragen_core.cli.main import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    rc = main(['plugins'])\n"
        f"print(rc, ','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rc, heavy = (out.stdout.strip().split(" ") + [""])[:2]
    assert rc == "0"
    assert heavy == "", f"'ragen plugins' imported {heavy}"


def test_plugins_works_with_broken_plugins_and_shows_status(tmp_path):
    fake_entry_points(tmp_path, "fake-broken", {"ragen_core.envs": {"brokenenv": "fakeplug_nope:SPEC"}}, add_to_path=False)
    fake_entry_points(tmp_path, "fake-old", {"ragen_core.envs": {"oldenv": "fakeplug_nope:SPEC"}}, requires=["ragen-core<0.0.1"], add_to_path=False)
    env = {"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = ragen("plugins", env=env)
    assert out.returncode == 0, out.stderr
    lines = {line.split()[1]: line for line in out.stdout.splitlines()[1:] if line.strip()}
    assert "brokenenv" in lines and " ok " in lines["brokenenv"]  # listing imports nothing, so it cannot tell
    assert "incompatible" in lines["oldenv"]
    check = ragen("plugins", "check", "--strict", env=env)
    assert check.returncode == 1
    assert "FAILED" in check.stdout and "brokenenv" in check.stdout
    relaxed = ragen("plugins", "check", env=env)  # a failure exits 1 without --strict too (scripts and CI read the exit)
    assert relaxed.returncode == 1 and "FAILED" in relaxed.stdout


def test_unknown_env_is_one_line_error_exit_2():
    out = ragen("env", "play", "sokobann", "--agent", "random")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines[0].startswith("PluginNotFoundError: no env named 'sokobann'")
    assert all(line.startswith("hint: ") for line in lines[1:])
    assert "Traceback" not in out.stderr


def test_verbose_shows_traceback():
    out = ragen("-v", "env", "play", "sokobann")
    assert out.returncode == 2 and "Traceback" in out.stderr


def test_bad_override_value_names_field(tmp_path):
    spec_src = (
        "from ragen_core import EnvSpec, EnvConfig\n"
        "class C(EnvConfig):\n    size: int = 3\n"
        "SPEC = EnvSpec(name='cfgenv', factory='x:y', config_model=C)\n"
    )
    fake_entry_points(tmp_path, "fake-cfg", {"ragen_core.envs": {"cfgenv": "fakeplug_cfg:SPEC"}},
                      modules={"fakeplug_cfg.py": spec_src}, add_to_path=False)
    env = {"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = ragen("env", "play", "cfgenv", "--set", "size=big", env=env)
    assert out.returncode == 2
    assert out.stderr.startswith("PluginConfigError: invalid config: env_config.size: Input should be a valid integer")


def test_init_env_package_installs_lists_passes_conformance_and_plays(tmp_path):
    made = ragen("init-env", "mygrid", "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    pkg = tmp_path / "ragen-env-mygrid"
    assert (pkg / "pyproject.toml").is_file()
    before = subprocess.run(  # not installed yet: one line saying so, not an error per test
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(pkg / "tests")],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
    )
    assert before.returncode == 2 and "env 'mygrid' is not installed: run 'pip install -e ragen-env-mygrid' first" in before.stdout + before.stderr
    assert "PluginNotFoundError" not in before.stdout + before.stderr
    site = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-q", "--target", str(site), str(pkg)],
        capture_output=True, text=True, timeout=300,
    )
    if install.returncode != 0 and "hatchling" in install.stderr:
        pytest.skip("hatchling is not installed in this environment")
    assert install.returncode == 0, install.stderr
    env = {"PYTHONPATH": str(site) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    listed = ragen("plugins", "--kind", "env", env=env)
    assert any(line.split()[1:3] == ["mygrid", "ragen-env-mygrid"] for line in listed.stdout.splitlines()[1:])
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(pkg / "tests")],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, **env), cwd=str(tmp_path),
    )
    assert tests.returncode == 0, tests.stdout[-2000:]
    assert " passed" in tests.stdout and "failed" not in tests.stdout
    played = ragen("env", "play", "mygrid", "--seed", "3", env=env, stdin="Right\nRight\nLeft\nq\n")
    assert played.returncode == 0, played.stderr
    assert "episode over" in played.stdout
    oracle_run = ragen("env", "play", "mygrid", "--seed", "3", env=env,
                       stdin="Left || Left\nLeft || Left\nLeft || Left\nRight || Right\nRight || Right\n")
    assert "episode over" in oracle_run.stdout


def test_init_env_rejects_bad_names_and_existing_dirs(tmp_path):
    bad = ragen("init-env", "My Grid", "--dir", str(tmp_path))
    assert bad.returncode == 2 and "invalid env name" in bad.stderr
    assert ragen("init-env", "grid2", "--dir", str(tmp_path)).returncode == 0
    again = ragen("init-env", "grid2", "--dir", str(tmp_path))
    assert again.returncode == 2 and "already exists" in again.stderr


def test_unrelated_broken_plugin_does_not_break_a_command(tmp_path):
    fake_entry_points(
        tmp_path, "fake-explodes",
        {"ragen_core.envs": {"explodes": "fakeplug_boom:SPEC"}, "ragen_core.rollout_filters": {"explodes": "fakeplug_boom:SPEC"}},
        modules={"fakeplug_boom.py": "raise RuntimeError('this plugin is broken')\n"}, add_to_path=False,
    )
    env = {"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    played = ragen("env", "play", "bandit", "--agent", "random", env=env)
    assert played.returncode == 0, played.stderr
    assert "episode over" in played.stdout
    asked = ragen("env", "play", "explodes", env=env)
    assert asked.returncode == 2
    assert "PluginLoadError: env 'explodes' from fake-explodes 0.0.1 failed to import: RuntimeError: this plugin is broken" in asked.stderr


def test_plugins_show_descriptions_are_whole_sentences_or_end_in_an_ellipsis():
    from ragen_core.cli.plugins import clip, first_sentence

    wrapped = "Group score: ``reward_variance`` (in-group\n    reward spread). Second sentence here."
    assert first_sentence(wrapped) == "Group score: ``reward_variance`` (in-group reward spread)."
    long = "word " * 40
    cut = first_sentence(long, limit=30)
    assert cut.endswith("…") and len(cut) <= 30 and not cut[:-1].endswith(" ")
    assert first_sentence("short, no full stop") == "short, no full stop"
    # an abbreviation does not end the sentence (it cut 'Named preset of the estimator (e.g.')
    assert first_sentence("Named preset of the estimator (e.g. gae's ``group-whiten``). More.") == \
        "Named preset of the estimator (e.g. gae's ``group-whiten``)."
    assert clip("'abcdef'", 5) == "'abc…" and clip("'ab'", 5) == "'ab'"


def test_plugins_paths_show_an_editable_installs_source_folder(tmp_path):
    import json

    from ragen_core.registry import dist_location

    class Dist:
        def __init__(self, direct):
            self.direct = direct

        def read_text(self, name):
            return json.dumps(self.direct) if name == "direct_url.json" and self.direct is not None else None

        def locate_file(self, path):
            return tmp_path / "site-packages" / path

    src = tmp_path / "my src" / "ragen-env-mygrid"
    editable = Dist({"url": src.as_uri(), "dir_info": {"editable": True}})
    assert dist_location(editable) == f"{src} (editable)"
    assert dist_location(Dist({"url": src.as_uri(), "dir_info": {}})) == str(tmp_path / "site-packages")  # built from a folder, copied
    assert dist_location(Dist(None)) == str(tmp_path / "site-packages")  # installed from an index
    assert dist_location(None) == ""


def test_output_cut_short_by_a_closed_pipe_is_not_a_traceback():
    """``ragen plugins show env NAME | head -1``: the reader goes away; ragen stops quietly. The read
    end is closed before ragen writes, so every write meets the closed pipe (no timing involved)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-c", "import sys; from ragen_core.cli.main import main; sys.exit(main())",
                               "plugins", "show", "env", "sokoban"], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    assert proc.returncode == 141


@pytest.mark.parametrize("argv", [["env", "play", "bandit", "--agent", "random", "--episodes", "-1"],
                                  ["eval", "--env", "bandit", "--groups", "0"], ["run", "--env", "bandit", "--steps", "0"]])
def test_counts_below_one_are_refused_by_the_parser(argv):
    out = ragen(*argv)
    assert out.returncode == 2 and "expected a number >= 1, got" in out.stderr.strip().splitlines()[-1], out.stderr


def test_init_env_refuses_a_name_an_installed_env_already_has(tmp_path):
    import re

    from ragen_core import registry
    from ragen_core.cli.init_env import scaffold
    from ragen_core.errors import RagenError

    taken = registry.names("env")[0]
    origin = registry.find("env", taken).origin
    with pytest.raises(RagenError, match=rf"^env name {taken!r} is taken: installed env {taken!r} comes from {re.escape(str(origin))}"):
        scaffold(taken, tmp_path)
    assert not any(tmp_path.iterdir())


def test_plugins_show_gives_a_nested_setting_the_default_its_parent_sets():
    """SearchQA's server settings default to ServiceConfig(ready_timeout_s=600); `plugins show` said
    120 (the settings class's own default), five times shorter than the wait a user then got."""
    from pydantic import BaseModel, Field

    from ragen_core.cli.plugins import field_rows

    class Inner(BaseModel):
        wait_s: float = 120.0
        """How long to wait."""

    class Outer(BaseModel):
        server: Inner = Field(default_factory=lambda: Inner(wait_s=600.0))
        plain: Inner = Field(default_factory=Inner)

    rows = {name: default for name, _, default, _ in field_rows(Outer)}
    assert rows == {"server.wait_s": "600.0", "plain.wait_s": "120.0"}


def test_plugins_show_takes_a_name_one_kind_alone_has_and_algo_for_algorithm(capsys):
    """`plugins show snr-topp` was refused ("needs KIND and NAME"), `plugins show algo grpo` was an
    unknown kind although --algo and algo_config spell it so."""
    from ragen_core import registry
    from ragen_core.cli.main import main

    if "snr-topp" not in registry.names("filter") or "grpo" not in registry.names("algorithm"):
        pytest.skip("ragen-filters or ragen-algo-grpo is not installed")
    assert main(["plugins", "show", "snr-topp"]) == 0
    assert capsys.readouterr().out.startswith("filter snr-topp — ")
    assert main(["plugins", "show", "algo", "grpo"]) == 0
    assert capsys.readouterr().out.startswith("algorithm grpo — ")
    if "grpo" in registry.names("estimator"):  # one name, two kinds: say which
        assert main(["plugins", "show", "grpo"]) == 2
        err = capsys.readouterr().err
        assert "'grpo' is the name of an estimator and an algorithm" in err.splitlines()[0] or \
            "'grpo' is the name of an algorithm and an estimator" in err.splitlines()[0]


class OwnLoss(Algorithm):
    """REINFORCE: reads none of the clip_ratio_* settings, logs a metric of its own."""

    metric_names = ("mean_log_prob",)

    def token_loss(self, inputs):
        return PolicyLossOutputs(-inputs.advantages * inputs.log_probs, metrics={"mean_log_prob": 0.0})


def test_plugins_show_says_an_algorithm_has_its_own_token_loss_and_metrics(capsys):
    """`plugins show` listed a REINFORCE plugin's clip_ratio_* settings as any algorithm's, and setting
    them did nothing; nor did it say the plugin's own loss or metrics (helper-87's brief)."""
    from ragen_core import registry
    from ragen_core.cli.main import main

    specs = [AlgorithmSpec(name="test-own-loss", summary="REINFORCE", factory=f"{__name__}:OwnLoss"),
             AlgorithmSpec(name="test-surrogate", summary="the clipped surrogate", factory="ragen_core:Algorithm")]
    for spec in specs:
        registry.register(spec)
    try:
        assert main(["plugins", "show", "algorithm", "test-own-loss"]) == 0
        own = capsys.readouterr().out
        assert main(["plugins", "show", "algorithm", "test-surrogate"]) == 0
        builtin = capsys.readouterr().out
    finally:
        for spec in specs:
            registry.unregister("algorithm", spec.name)
    notes = own.split("\nconfig fields:")[0].splitlines()[2:]
    assert notes == ["token_loss: its own, not the built-in clipped surrogate; clip_ratio_low, clip_ratio_high and clip_ratio_c are read "
                     "only by that surrogate, so they do nothing unless its token_loss reads them",
                     "metrics of its own: actor/algo/mean_log_prob"]
    assert "clip_ratio_low" in own.split("\nconfig fields:")[1]  # (still its settings: a token_loss may call the surrogate)
    assert builtin.split("\nconfig fields:")[0].splitlines()[2:] == []  # the built-in surrogate reads them: nothing to say


@pytest.mark.parametrize(("name", "needle"), [("grid-", "not at the end, not doubled"), ("my--grid", "not at the end, not doubled"),
                                              ("ragen-env-foo", "the package gets the ragen-env- prefix itself")])
def test_init_env_refuses_names_that_make_a_bad_distribution(tmp_path, name, needle):
    """ragen-env-grid- does not install; my--grid installs as my-grid (helper-63's walk)."""
    from ragen_core.cli.init_env import scaffold
    from ragen_core.errors import RagenError

    with pytest.raises(RagenError, match=needle):
        scaffold(name, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_init_env_into_a_folder_it_cannot_write_is_one_line(tmp_path):
    from ragen_core.cli.init_env import scaffold
    from ragen_core.errors import RagenError

    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(RagenError, match=r"cannot create the package in .*afile/ragen-env-zz: .*\n?") as err:
        scaffold("zz", afile)
    assert "pass --dir a folder you can write to" in str(err.value)


def test_the_scaffold_readme_lists_every_setting_of_its_config(tmp_path):
    """`ragen plugins show env NAME` listed max_tokens; the scaffold's README table did not (helper-63's walk)."""
    import re

    from ragen_core.cli.init_env import scaffold
    from ragen_core.interfaces.env import EnvConfig

    readme = (scaffold("tablecheck", tmp_path) / "README.md").read_text()
    listed = set(re.findall(r"^\| `([a-z_]+)` \|", readme, flags=re.MULTILINE))
    assert set(EnvConfig.model_fields) <= listed, set(EnvConfig.model_fields) - listed


def test_init_env_force_starts_over_and_keeps_the_old_folder_aside(tmp_path):
    """--force wrote the template over the folder: files the user added stayed, mixed into the 'fresh' package (helper-63's walk)."""
    from ragen_core.cli.init_env import scaffold

    pkg = scaffold("grid4", tmp_path)
    env_py = next(pkg.rglob("env.py"))
    template_env = env_py.read_text()
    env_py.write_text("# my work\n")
    (pkg / "notes.txt").write_text("mine")
    again = ragen("init-env", "grid4", "--force", "--dir", str(tmp_path))
    assert again.returncode == 0, again.stderr
    aside = tmp_path / "ragen-env-grid4.old-1"
    assert f"moved the existing {pkg} to {aside}" in again.stderr
    assert env_py.read_text() == template_env and not (pkg / "notes.txt").exists()  # fresh, not merged
    assert (aside / "notes.txt").read_text() == "mine" and next(aside.rglob("env.py")).read_text() == "# my work\n"  # nothing lost
    assert ragen("init-env", "grid4", "--force", "--dir", str(tmp_path)).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ragen-env-grid4", "ragen-env-grid4.old-1", "ragen-env-grid4.old-2"]


def test_init_env_force_may_start_over_the_folder_an_editable_install_points_at(tmp_path):
    """Re-scaffolding your own `pip install -e` package was refused as a name 'taken' by... itself (helper-63's walk);
    another folder, or the same name installed from elsewhere, still clashes."""
    import json

    site = tmp_path / "site"
    fake_entry_points(site, "ragen-env-grid5", {"ragen_core.envs": {"grid5": "ragen_env_grid5.plugin:SPEC"}}, add_to_path=False)
    env = {"PYTHONPATH": str(site) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    from ragen_core.cli.init_env import scaffold

    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    scaffold("grid5", work)  # then installed editable (the fake record below)
    elsewhere.mkdir()
    info = next(site.glob("*.dist-info"))
    (info / "direct_url.json").write_text(json.dumps({"url": (work / "ragen-env-grid5").as_uri(), "dir_info": {"editable": True}}))
    own = ragen("init-env", "grid5", "--force", "--dir", str(work), env=env)
    assert own.returncode == 0, own.stderr
    assert (work / "ragen-env-grid5" / "pyproject.toml").is_file() and (work / "ragen-env-grid5.old-1").is_dir()
    other = ragen("init-env", "grid5", "--dir", str(elsewhere), env=env)
    assert other.returncode == 2 and "env name 'grid5' is taken" in other.stderr and not any(elsewhere.iterdir())
    (info / "direct_url.json").write_text(json.dumps({"url": (work / "ragen-env-grid5").as_uri(), "dir_info": {}}))  # a copy, not editable
    assert ragen("init-env", "grid5", "--force", "--dir", str(work), env=env).returncode == 2
    # an editable package the scaffold did not write (a shipped env's folder in a checkout of RAGEN) stays refused
    (info / "direct_url.json").write_text(json.dumps({"url": (work / "ragen-env-grid5").as_uri(), "dir_info": {"editable": True}}))
    (work / "ragen-env-grid5" / "pyproject.toml").write_text('[project]\nname = "ragen-env-grid5"\n')
    shipped = ragen("init-env", "grid5", "--force", "--dir", str(work), env=env)
    assert shipped.returncode == 2 and shipped.stderr.startswith(
        f"RagenError: {work / 'ragen-env-grid5'} is the editable install of env 'grid5', but not a package 'ragen init-env' wrote")


def test_plugins_check_names_a_plugin_whose_runs_would_be_refused_here_without_failing_it(tmp_path):
    """`plugins check --strict` said vllm was 'ok' where `ragen run --engine vllm` is refused at once (helper-72's walk).
    A missing dependency is no plugin bug: 'unavailable', exit 0; an availability check that crashes is a failure."""
    spec_src = (
        "from ragen_core import EnvSpec\n"
        "from ragen_core.errors import ConfigError\n"
        "def needs_tool(config):\n    raise ConfigError('needtool env: the tool is not installed')\n"
        "def broken(config):\n    raise ValueError('bug in the check')\n"
        "SPEC = EnvSpec(name='needtool', summary='needs a tool.', factory='fakeplug_avail:SPEC', availability='fakeplug_avail:needs_tool')\n"
        "from ragen_core import EnvConfig\n"
        "class Needs(EnvConfig):\n    data_path: str\n"
        "NEEDS = EnvSpec(name='needsdata', summary='needs a setting.', factory='fakeplug_avail:SPEC', config_model=Needs, "
        "availability='fakeplug_avail:needs_tool')\n"
        "BROKEN = EnvSpec(name='brokencheck', summary='its check crashes.', factory='fakeplug_avail:SPEC', availability='fakeplug_avail:broken')\n"
    )
    fake_entry_points(tmp_path, "fake-avail", {"ragen_core.envs": {"needtool": "fakeplug_avail:SPEC"}},
                      modules={"fakeplug_avail.py": spec_src}, add_to_path=False)
    env = {"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""), "RAGEN_LOAD_PLUGINS": "fake-avail"}
    out = ragen("plugins", "check", "--kind", "env", env=env)
    assert out.returncode == 0, out.stdout
    (row,) = [line for line in out.stdout.splitlines() if " needtool " in line]
    assert row.split()[4:] == ["unavailable", "needtool", "env:", "the", "tool", "is", "not", "installed"]
    assert out.stdout.splitlines()[-1].startswith("0 ok, 0 failed, ") and ", 1 unavailable here (" in out.stdout.splitlines()[-1]
    # a plugin whose settings have no default is checked when a run names them, not called unavailable (helper-74's review)
    (tmp_path / "fake_avail-0.0.1.dist-info" / "entry_points.txt").write_text("[ragen_core.envs]\nneedsdata = fakeplug_avail:NEEDS\n")
    out = ragen("plugins", "check", "--kind", "env", env=env)
    assert "unavailable" not in out.stdout
    (tmp_path / "fake_avail-0.0.1.dist-info" / "entry_points.txt").write_text("[ragen_core.envs]\nbrokencheck = fakeplug_avail:BROKEN\n")
    out = ragen("plugins", "check", "--kind", "env", env=env)
    assert out.returncode == 1 and "FAILED" in out.stdout and "ValueError: bug in the check" in out.stdout


def test_plugins_check_names_a_spec_module_that_imports_torch(tmp_path):
    """README: the entry points' targets import no torch; plugins check said 'ok' to one that did (helper-75's walk)."""
    spec_src = ("import torch\nfrom ragen_core import FilterSpec\n"
                "SPEC = FilterSpec(name='heavy', summary='imports torch.', factory='fakeplug_heavy:SPEC')\n")
    fake_entry_points(tmp_path, "fake-heavy", {"ragen_core.rollout_filters": {"heavy": "fakeplug_heavy:SPEC"}},
                      modules={"fakeplug_heavy.py": spec_src}, add_to_path=False)
    env = {"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = ragen("plugins", "check", "--kind", "filter", env=env)
    (row,) = [line for line in out.stdout.splitlines() if " heavy " in line]
    assert "its spec module imports torch" in row
    assert not any("imports torch" in line for line in out.stdout.splitlines() if " heavy " not in line)  # ours import none


THIRD_PARTY = '''
from pydantic import Field
from ragen_core import AlgorithmSpec, DiagnosticSpec
from ragen_core.interfaces.algorithm import AlgorithmConfig

class WalkAlgoConfig(AlgorithmConfig):
    estimator: str = "rloo"
    use_critic: bool = Field(default=False, description="This algorithm is critic-free.")
    boost: float = 1.0
    """How much to boost."""

ALGO = AlgorithmSpec(name="walkalgo", summary="a walk algorithm.", factory="ragen_core:Algorithm", config_model=WalkAlgoConfig)
NOSET = DiagnosticSpec(name="walknoset", summary="takes no settings.", factory="walkplug:NOSET")
'''


def _third_party(tmp_path, entry_points: dict[str, dict[str, str]], source: str = THIRD_PARTY) -> dict[str, str]:
    """A third-party distribution ``ragen-walk`` (module ``walkplug``) and the environment of a
    ``ragen`` subprocess that sees it alone among the non-core plugins, on a wide terminal."""
    fake_entry_points(tmp_path, "ragen-walk", entry_points, modules={"walkplug.py": source}, add_to_path=False)
    return {"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""), "RAGEN_LOAD_PLUGINS": "ragen-walk",
            "COLUMNS": "200"}


def test_plugins_show_says_in_one_line_that_a_plugin_has_no_settings(tmp_path):
    """A plugin without settings showed an empty FIELD/TYPE/DEFAULT/DESCRIPTION table (helper-80's walk)."""
    env = _third_party(tmp_path, {"ragen_core.diagnostics": {"walknoset": "walkplug:NOSET"}})
    out = ragen("plugins", "show", "diagnostic", "walknoset", env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().splitlines()[-1] == "config fields: none (diagnostic walknoset takes no settings)"
    assert "FIELD" not in out.stdout


def test_plugins_show_gives_an_override_without_a_docstring_the_description_it_overrides(tmp_path):
    """``estimator: str = "rloo"`` in a plugin's AlgorithmConfig showed no description, although
    AlgorithmConfig documents estimator (helper-80's walk); an override's own description wins."""
    env = _third_party(tmp_path, {"ragen_core.algorithms": {"walkalgo": "walkplug:ALGO"}})
    out = ragen("plugins", "show", "algorithm", "walkalgo", env=env)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: " ".join(line.split()[2:]) for line in out.stdout.splitlines() if line[:1].isalpha()}  # DEFAULT DESCRIPTION
    assert rows["estimator"] == "'rloo' Name of the advantage estimator plugin."
    assert rows["use_critic"] == "False This algorithm is critic-free."
    assert rows["boost"] == "1.0 How much to boost."


def test_plugins_check_says_which_names_are_allowed_for_a_spec_name_out_of_form(tmp_path):
    """The row said "String should match pattern '^[a-z][a-z0-9-]*$'", and was cut before the name (helper-80's walk)."""
    env = _third_party(tmp_path, {"ragen_core.diagnostics": {"walk-bad": "walkplug:BAD"}},
                       THIRD_PARTY + "BAD = DiagnosticSpec(name='Walk_Bad', summary='bad.', factory='walkplug:NOSET')\n")
    out = ragen("plugins", "check", "--kind", "diagnostic", env=env)
    assert out.returncode == 1
    (row,) = [line for line in out.stdout.splitlines() if " walk-bad " in line]
    assert row.endswith("name: a plugin name is lower-case letters, digits and '-', starting with a letter, e.g. 'walk-bad' "
                        "(got 'Walk_Bad')")


WIDE = '''
from typing import Literal
from ragen_core import AlgorithmSpec
from ragen_core.interfaces.algorithm import AlgorithmConfig

class WideConfig(AlgorithmConfig):
    loss_agg_mode: Literal["token-mean", "my-mode"] = "token-mean"
    kl_loss_type: Literal["k1", "k9"] = "k1"

WIDE = AlgorithmSpec(name="walkwide", summary="widens loss_agg_mode.", factory="ragen_core:Algorithm", config_model=WideConfig,
                     presets={"mine": {"loss_agg_mode": "my-mode"}})
class WideDefault(WideConfig):
    loss_agg_mode: Literal["token-mean", "my-mode"] = "my-mode"

WIDE_DEFAULT = AlgorithmSpec(name="walkwide2", summary="defaults to a mode no loss implements.", factory="ragen_core:Algorithm",
                             config_model=WideDefault)
'''


def test_a_loss_setting_no_loss_code_implements_is_refused_by_plugins_check_and_before_a_run(tmp_path):
    """An algorithm config that widens loss_agg_mode (or a KL type) past what the loss code
    implements passed `plugins check` and `--print-config`, and a run stopped at its first update
    (helper-80's walk)."""
    env = _third_party(tmp_path, {"ragen_core.algorithms": {"walkwide": "walkplug:WIDE", "walkwide2": "walkplug:WIDE_DEFAULT"}}, WIDE)
    out = ragen("plugins", "check", "--kind", "algorithm", env=env)
    assert out.returncode == 1
    rows = {line.split()[1]: line for line in out.stdout.splitlines()[1:] if line.strip() and "FAILED" in line}
    assert "its preset 'mine' is broken" in rows["walkwide"] and "loss_agg_mode: 'my-mode' is no aggregation the loss code implements" \
        in rows["walkwide"]
    assert "the default of loss_agg_mode fails its own validation" in rows["walkwide2"]
    env["RAGEN_LOAD_PLUGINS"] += ",ragen-env-bandit,ragen-algo-grpo,ragen-filters"
    out = ragen("run", "--env", "bandit", "--algo", "walkwide", "algo_config.kl_loss_type=k9", "--print-config", env=env)
    assert out.returncode == 2
    first = out.stderr.splitlines()[0]
    assert first.startswith("PluginConfigError: invalid config: algo_config.kl_loss_type: 'k9' is no KL estimator the loss code "
                            "implements: one of abs, abs+, k1, ") and first.endswith(" (got 'k9')")


BUILDS = '''
from ragen_core import Algorithm, AlgorithmSpec, FilterSpec
from ragen_core.interfaces.rollout_filter import FilterConfig, RolloutFilter

class BrokenFilter(RolloutFilter):
    def __init__(self, config=None):
        raise RuntimeError("walkfilter cannot be built")

    def select(self, rollouts):
        raise AssertionError("never built")

class ZeroNorm(Algorithm):
    @property
    def agg_kwargs(self):
        return {"norm_constant": 0.0}

FILT = FilterSpec(name="walkfilter", summary="cannot be built.", factory="walkplug:BrokenFilter")
ALGO = AlgorithmSpec(name="walkzero", summary="divides by zero.", factory="walkplug:ZeroNorm")
'''


def test_plugins_check_strict_builds_the_plugins_whose_building_is_cheap(tmp_path):
    """`plugins check --strict` said 'ok' to a filter whose constructor raises and to an algorithm whose
    agg_kwargs a run refuses (helper-80's walk): --strict builds estimators, algorithms, filters and
    diagnostics with their default settings (cheap: no model, no data); without it nothing is built."""
    env = _third_party(tmp_path, {"ragen_core.rollout_filters": {"walkfilter": "walkplug:FILT"},
                                  "ragen_core.algorithms": {"walkzero": "walkplug:ALGO"}}, BUILDS)
    env["RAGEN_LOAD_PLUGINS"] += ",ragen-algo-grpo"  # walkzero's estimator, grpo
    relaxed = ragen("plugins", "check", "--kind", "filter", env=env)
    assert relaxed.returncode == 0, relaxed.stdout
    strict = ragen("plugins", "check", "--strict", env=env)
    assert strict.returncode == 1
    rows = {line.split()[1]: line for line in strict.stdout.splitlines()[1:] if line.strip()}
    assert rows["walkfilter"].split("FAILED", 1)[1].strip() == ("PluginError: filter 'walkfilter' (ragen-walk 0.0.1) raised in its factory "
                                                                "walkplug:BrokenFilter: RuntimeError: walkfilter cannot be built")
    assert "FAILED    PluginError: algorithm 'walkzero' (ragen-walk 0.0.1): its agg_kwargs give norm_constant=0.0" in rows["walkzero"]
    assert " ok " in rows["grpo"]  # an installed algorithm, built


class InfoEnv:
    """An env class for ``plugins show``: only its declared info metrics are read."""

    info_metrics = {"hit": "mean", "score": "last"}


class PlainEnv:
    pass


def test_plugins_show_env_names_its_info_metrics(capsys):
    """`plugins show env NAME` said nothing of the info metrics a run logs for the env (train/TAG/info/KEY),
    so a user learnt them only from the code (helper-114's walk)."""
    from ragen_core import registry
    from ragen_core.cli.main import main
    from ragen_core.specs import EnvSpec

    specs = [EnvSpec(name="test-info-env", summary="declares two", factory=f"{__name__}:InfoEnv"),
             EnvSpec(name="test-plain-env", summary="declares none", factory=f"{__name__}:PlainEnv")]
    for spec in specs:
        registry.register(spec)
    try:
        assert main(["plugins", "show", "env", "test-info-env"]) == 0
        info = capsys.readouterr().out
        assert main(["plugins", "show", "env", "test-plain-env"]) == 0
        plain = capsys.readouterr().out
    finally:
        for spec in specs:
            registry.unregister("env", spec.name)
    notes = [line for line in info.split("\nconfig fields:")[0].splitlines() if line.startswith("info metrics")]
    assert notes == ["info metrics: hit (mean), score (last): logged as train/TAG/info/KEY, TAG the run's preset or else "
                     "test-info-env (val-env/TAG/info/KEY in validation, info/KEY in ragen eval)"]
    assert "info metrics: none" in plain.split("\nconfig fields:")[0]
