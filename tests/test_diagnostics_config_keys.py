"""``diagnostics_config`` keys that no diagnostic reads: a misspelled name is refused, settings of a
diagnostic that ``diagnostics`` does not list are warned about (ragen_core.trainer.config)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ragen_core.errors import ConfigError, PluginConfigError
from ragen_core.testing.run_helpers import CHILD_MAIN, TOY_RUN, one_line_error, register_toy_env, toy_run_config
from ragen_core.trainer.config import check_plugin_configs, run_warnings


def test_a_misspelled_diagnostic_name_is_refused_listing_the_known_names():
    config = toy_run_config(None, "diagnostics=[collapse]", "diagnostics_config.colapse.z_source=response")
    with pytest.raises(PluginConfigError) as info:
        check_plugin_configs(config)
    message = str(info.value)
    assert "\n" not in message
    assert "diagnostics_config.colapse" in message and "did you mean 'collapse'" in message and "known diagnostics: collapse" in message


def test_settings_keyed_under_another_spelling_of_a_listed_diagnostic_are_read():
    # names and keys are both recorded as the registry spells them, so the settings reach the diagnostic
    config = toy_run_config(None, "diagnostics=[Collapse]", "diagnostics_config.COLLAPSE.compute_freq=2")
    assert config.diagnostics == ["collapse"] and config.diagnostics_config == {"collapse": {"compute_freq": 2}}
    check_plugin_configs(config)
    assert run_warnings(config) == []
    with pytest.raises(ConfigError, match="diagnostics_config has both 'collapse' and 'Collapse', two spellings of 'collapse'"):
        toy_run_config(None, "diagnostics_config.collapse.compute_freq=2", "diagnostics_config.Collapse.compute_freq=3")


def test_settings_of_a_diagnostic_that_is_not_turned_on_warn_once():
    config = toy_run_config(None, "diagnostics_config.collapse.compute_freq=2")
    check_plugin_configs(config)  # accepted: turning a diagnostic off while its settings stay is normal
    warnings = run_warnings(config)
    assert len(warnings) == 1
    assert "diagnostics_config.collapse" in warnings[0] and "diagnostics=[collapse]" in warnings[0]
    on = toy_run_config(None, "diagnostics=[collapse]", "diagnostics_config.collapse.compute_freq=2")
    check_plugin_configs(on)
    assert run_warnings(on) == []


def _ragen_run(tmp_path, *args):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-c", CHILD_MAIN, "run", "--env", register_toy_env(), "--run-dir", str(tmp_path / "run"), *TOY_RUN, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def test_ragen_run_refuses_the_misspelling_and_warns_about_unlisted_settings(tmp_path):
    bad = _ragen_run(tmp_path, "--print-config", "diagnostics_config.colapse.compute_freq=2")
    assert bad.returncode == 2
    assert "known diagnostics: collapse" in one_line_error(bad.stderr)
    ok = _ragen_run(tmp_path, "--steps", "1", "save_freq=0", "diagnostics_config.collapse.compute_freq=2")
    assert ok.returncode == 0, ok.stderr[-2000:]
    lines = [line for line in ok.stderr.splitlines() if "diagnostics_config.collapse" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: "), ok.stderr[-2000:]
