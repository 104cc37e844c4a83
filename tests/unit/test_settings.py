"""Settings parsed from an injected environment mapping."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tts_queue.cli.docgen import REGENERATE, configuration_doc
from tts_queue.errors import ConfigError
from tts_queue.settings import PoolSettings, Settings, describe, markdown_table


def test_empty_environment_gives_the_documented_defaults() -> None:
    # Given no TTS_ variables at all
    settings = Settings.from_env({})
    # Then every field has its default
    assert settings == Settings()
    assert settings.voices.default == "en_US-joe-medium"
    assert settings.routing.cpu == PoolSettings(policy="eager", max_batch=1, runners=2)
    assert settings.routing.gpu.runners == 1
    assert settings.routing.gpu.policy == "eager" and settings.routing.gpu.max_batch == 32
    assert settings.routing.voice_pools == {}


def test_values_are_parsed_to_their_field_types() -> None:
    # Given variables for a string, ints, a float, a bool and paths
    env = {
        "TTS_DEFAULT_VOICE": "joe",
        "TTS_PORT": "9000",
        "TTS_MAX_TEXT_CHARS": "200",
        "TTS_SYNC_WAIT_S": "1.5",
        "TTS_WARMUP": "no",
        "TTS_DATA_DIR": "~/tts-data",
        "TTS_VOICES_DIR": "/srv/voices",
        "TTS_REDIS_URL": "redis://127.0.0.1:6379/3",
        "TTS_PROVIDERS": "cuda,cpu",
    }
    # When they are parsed
    settings = Settings.from_env(env)
    # Then each has the right type and value
    assert settings.voices.default == "joe"
    assert settings.api.port == 9000
    assert settings.request.max_text_chars == 200
    assert settings.api.sync_wait_s == 1.5
    assert settings.worker.warmup is False
    assert settings.data_dir == Path.home() / "tts-data"
    assert settings.voices.dir == Path("/srv/voices")
    assert settings.services.redis_url == "redis://127.0.0.1:6379/3"
    assert settings.onnx.providers == "cuda,cpu"


@pytest.mark.parametrize(
    ("raw", "value"),
    [("1", True), ("true", True), ("YES", True), ("on", True),
     ("0", False), ("False", False), ("no", False), ("off", False)],
)
def test_boolean_spellings(raw: str, value: bool) -> None:
    # Given a boolean variable spelled in one of the accepted ways
    # Then it parses to the right bool
    assert Settings.from_env({"TTS_WARMUP": raw}).worker.warmup is value


def test_unknown_foreign_and_empty_variables_are_ignored() -> None:
    # Given a typo'd TTS_ variable, an unrelated variable and an empty value
    env = {"TTS_PROT": "1", "PORT": "1", "HOME": "/x", "TTS_PORT": ""}
    # Then nothing changes
    assert Settings.from_env(env) == Settings()


def test_pool_variables_change_only_their_pool() -> None:
    # Given CPU pool variables and one GPU variable
    env = {
        "TTS_CPU_MAX_BATCH": "8",
        "TTS_CPU_POLICY": "window",
        "TTS_CPU_WINDOW_MS": "25",
        "TTS_CPU_MAX_PADDED_PHONEMES": "999",
        "TTS_GPU_MAX_BATCH": "64",
        "TTS_DEFAULT_POOL": "gpu",
    }
    # When they are parsed
    settings = Settings.from_env(env)
    # Then the CPU pool has the new values and the GPU pool keeps its other defaults
    assert settings.routing.cpu == PoolSettings(policy="window", max_batch=8, max_padded_phonemes=999,
                                             window_ms=25.0, runners=2)
    assert settings.routing.gpu == dataclasses.replace(Settings().routing.gpu, max_batch=64)
    assert settings.pool("cpu") is settings.routing.cpu
    assert settings.pool("gpu") is settings.routing.gpu
    assert settings.routing.default_pool == "gpu"


def test_voice_pools_map_voices_to_pools() -> None:
    # Given voice=pool pairs with stray spaces and a trailing comma
    # Then each voice maps to its pool
    settings = Settings.from_env({"TTS_VOICE_POOLS": " joe=gpu, tiny = cpu ,"})
    assert settings.routing.voice_pools == {"joe": "gpu", "tiny": "cpu"}


def test_pools_scaled_from_zero_are_a_list() -> None:
    assert Settings.from_env({"TTS_SCALE_FROM_ZERO": " gpu, "}).routing.pools_from_zero == ("gpu",)
    assert Settings().routing.pools_from_zero == ()


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("TTS_PORT", "eighty"),
        ("TTS_SYNC_WAIT_S", "soon"),
        ("TTS_WARMUP", "maybe"),
        ("TTS_CPU_MAX_BATCH", "four"),
        ("TTS_CPU_MAX_BATCH", "0"),
        ("TTS_GPU_WINDOW_MS", "fast"),
        ("TTS_CPU_POLICY", "greedy"),
        ("TTS_GPU_POLICY", "fifo"),
        ("TTS_DEFAULT_POOL", "tpu"),
        ("TTS_VOICE_POOLS", "joe=tpu"),
        ("TTS_VOICE_POOLS", "joe"),
        ("TTS_MAX_TEXT_CHARS", "0"),
        ("TTS_MAX_SENTENCE_PHONEMES", "8"),
        ("TTS_DEFAULT_FORMAT", "mp4"),
        ("TTS_PROVIDERS", "rocm"),
        ("TTS_PROVIDERS", "auto,cpu"),
        ("TTS_PROVIDERS", ","),
        ("TTS_GRAPH_OPTIMIZATION", "max"),
        ("TTS_WORKER_POOL", "tpu"),
        ("TTS_SCALE_FROM_ZERO", "gpu,tpu"),
    ],
)
def test_bad_values_are_config_errors(name: str, raw: str) -> None:
    # Given one variable with a value that cannot work
    # When the environment is parsed
    # Then ConfigError is raised, naming the variable
    with pytest.raises(ConfigError) as info:
        Settings.from_env({name: raw})
    assert name.removeprefix("TTS_").split("_")[0] in info.value.message.upper()


def test_unknown_pool_name_is_a_config_error() -> None:
    # Given a pool name other than cpu or gpu
    # Then asking for its budget is a ConfigError
    with pytest.raises(ConfigError, match="unknown pool"):
        Settings().pool("tpu")


def test_derived_paths_and_database_url(tmp_path: Path) -> None:
    # Given a data directory and no other paths
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path)})
    # Then audio, voices and the SQLite database live under it
    assert settings.audio_dir == tmp_path / "audio"
    assert settings.voices_dir == tmp_path / "voices"
    assert settings.database_url == f"sqlite:///{tmp_path / 'tts-queue.db'}"
    # And explicit values win
    explicit = settings.replace(**{"voices.dir": Path("/v"), "services.database_url": "postgresql://h/db"})
    assert explicit.voices_dir == Path("/v")
    assert explicit.database_url == "postgresql://h/db"


def test_settings_are_frozen_and_replace_makes_a_copy() -> None:
    # Given settings
    # When a field is replaced
    # Then the copy changes and the original is untouched and cannot be assigned to
    settings = Settings()
    changed = settings.replace(**{"api.port": 1234})
    assert changed.api.port == 1234 and settings.api.port == 8000
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.api.port = 1  # type: ignore[misc]


def test_replace_validates_and_rejects_unknown_paths() -> None:
    # Given settings
    # When a replaced value cannot work, or names no setting
    # Then ConfigError says so
    with pytest.raises(ConfigError):
        Settings().replace(**{"worker.pool": "tpu"})
    with pytest.raises(ConfigError, match="no setting"):
        Settings().replace(**{"api.prot": 1})


def test_every_variable_is_documented_once() -> None:
    # Given the declared settings
    infos = describe()
    # Then each variable has documentation and a unique name, and every group is covered
    names = [info.variable for info in infos]
    assert len(names) == len(set(names)) > 40
    assert all(info.doc for info in infos), [i.variable for i in infos if not i.doc]
    assert {"TTS_PORT", "TTS_CPU_MAX_BATCH", "TTS_GPU_WINDOW_MS", "TTS_PROVIDERS", "TTS_VOICES_DIR",
            "TTS_HOT_CACHE_SIZE", "TTS_WORKER_POOL", "TTS_API_URL"} <= set(names)


def test_the_configuration_doc_is_generated_from_the_declarations() -> None:
    # Given docs/configuration.md
    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")
    # Then it is exactly what its generator makes of the declarations
    assert doc == configuration_doc(), f"docs/configuration.md is stale: run {REGENERATE}"
    # And every variable has its row there, under one group's heading or another
    rows = [line for line in doc.splitlines() if line.startswith("| `TTS_")]
    assert len(rows) == len(describe())
    assert all(markdown_table([info]).splitlines()[-1] in rows for info in describe())


def test_a_flag_and_its_variable_are_one_setting() -> None:
    # Given a parser with the flags of two settings
    import argparse

    from tts_queue.cli.flags import add_flags, apply_flags

    parser = argparse.ArgumentParser()
    add_flags(parser, "api.port", "worker.pool")
    # When the variable says one thing and the flag another
    settings = Settings.from_env({"TTS_PORT": "9000", "TTS_WORKER_POOL": "gpu"})
    flagged = apply_flags(settings, parser.parse_args(["--port", "9100"]))
    # Then the flag wins, an absent flag keeps the variable, and the help names the variable
    assert flagged.api.port == 9100 and flagged.worker.pool == "gpu"
    assert "TTS_PORT" in parser.format_help()
    with pytest.raises(SystemExit):  # choices come from the declaration too
        parser.parse_args(["--pool", "tpu"])
