"""The voice registry (manifest, discovery, aliases, digests, LRU) and speaker resolution."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_voice
from tests.support.tiny_voice import HOP_LENGTH, SAMPLE_RATE, SPEAKERS, VoiceFiles, write_voice
from tts_queue.errors import (
    DigestMismatch,
    ModelLoadError,
    UnknownSpeaker,
    UnknownVoice,
    VoiceError,
    VoiceFilesMissing,
)
from tts_queue.settings import Settings
from tts_queue.synthesis.registry import VoiceRegistry, discover_specs, file_sha256, manifest_specs
from tts_queue.synthesis.voice import LoadedVoice, PiperVoice, VoiceSpec, resolve_speaker


def write_manifest(directory: Path, entries: list[dict[str, Any]]) -> Path:
    """A ``voices.json`` in ``directory`` (files without a package live beside it)."""
    path = directory / "voices.json"
    path.write_text(json.dumps({"voices": entries}), encoding="utf-8")
    return path


def manifest_entry(files: VoiceFiles, **extra: Any) -> dict[str, Any]:
    entry = {
        "id": files.name,
        "model": files.model_path.name,
        "config": files.config_path.name,
        "language": "en_US",
        "sample_rate": SAMPLE_RATE,
    }
    entry.update(extra)
    return entry


@pytest.fixture
def own_voice(tmp_path: Path) -> VoiceFiles:
    """A tiny voice in this test's own directory, free to damage."""
    return write_voice(tmp_path, "tiny")


class CountingLoader:
    """A registry loader that records which voices it loaded."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, spec: VoiceSpec) -> PiperVoice:
        self.calls.append(spec.id)
        return load_voice(spec)


# --- manifest and discovery ---------------------------------------------------------------------


def test_manifest_lists_voices_with_files_beside_it(own_voice: VoiceFiles) -> None:
    # Given a manifest with the tiny voice, its digest and aliases
    digest = file_sha256(own_voice.model_path)
    manifest = write_manifest(
        own_voice.model_path.parent,
        [manifest_entry(own_voice, sha256=digest, aliases=["small", "Wee"])],
    )
    # When it is read
    [spec] = manifest_specs(manifest)
    # Then the spec points at the files beside the manifest and carries the metadata
    assert spec.id == "tiny"
    assert spec.model_path == own_voice.model_path
    assert spec.config_path == own_voice.config_path
    assert spec.sha256 == digest
    assert spec.aliases == ("small", "Wee")
    assert spec.language == "en_US"
    assert spec.sample_rate == SAMPLE_RATE
    assert spec.num_speakers == 1
    assert spec.present


def test_manifest_voice_of_a_missing_package_is_listed_but_missing(tmp_path: Path) -> None:
    # Given a manifest entry whose package is not installed
    manifest = write_manifest(
        tmp_path,
        [{"id": "ghost", "package": "no_such_voice_package_xyz", "model": "g.onnx",
          "config": "g.onnx.json"}],
    )
    # When the registry is built from it
    registry = VoiceRegistry(manifest_specs(manifest), loader=load_voice, default="ghost")
    # Then the voice is known but missing, and loading it says which files are missing
    spec = registry.get("ghost")
    assert not spec.present
    assert registry.status(spec) == "missing"
    with pytest.raises(VoiceFilesMissing):
        registry.load("ghost")


def test_discovery_finds_piper_voices_in_a_directory(voices_dir: Path) -> None:
    # Given a directory with the tiny and the three-speaker voice
    # When it is scanned
    specs = {spec.id: spec for spec in discover_specs(voices_dir)}
    # Then both are found with metadata from their configs and no digest
    assert set(specs) == {"tiny", "multi"}
    assert specs["tiny"].language == "en_US"
    assert specs["tiny"].sample_rate == SAMPLE_RATE
    assert specs["tiny"].speakers == ()
    assert specs["tiny"].sha256 is None
    assert specs["multi"].speakers == SPEAKERS
    assert specs["multi"].num_speakers == 3


def test_discovery_skips_models_without_a_readable_config(tmp_path: Path) -> None:
    # Given a model without a config, one with a broken config, and a good voice
    write_voice(tmp_path, "good")
    (tmp_path / "lonely.onnx").write_bytes(b"x")
    (tmp_path / "broken.onnx").write_bytes(b"x")
    (tmp_path / "broken.onnx.json").write_text("{not json", encoding="utf-8")
    # When the directory is scanned
    # Then only the good voice is listed
    assert [spec.id for spec in discover_specs(tmp_path)] == ["good"]
    # And a directory that does not exist has no voices
    assert discover_specs(tmp_path / "nope") == []


def test_from_settings_merges_the_manifest_and_the_voices_directory(
    tmp_path: Path, voices_dir: Path
) -> None:
    # Given settings with the project's manifest and a voices directory
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                  "TTS_DEFAULT_VOICE": "tiny"})
    # When the registry is built
    registry = VoiceRegistry.from_settings(settings)
    # Then it knows the shipped default voice by its aliases, the Japanese voices (the ja extra,
    # which .[dev] installs) and, after the manifest's, the dropped-in ones
    ids = [spec.id for spec in registry.specs()]
    assert ids[0] == "en_US-joe-medium"
    assert ids[1:6] == ["jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"]
    assert set(ids[6:]) == {"tiny", "multi"}
    assert registry.get("joe").id == "en_US-joe-medium"
    assert registry.get(None).id == "tiny"
    assert registry.get("en_US-joe-medium").sha256 is not None


# --- names --------------------------------------------------------------------------------------


def test_names_are_ids_or_aliases_in_any_case(own_voice: VoiceFiles) -> None:
    # Given a registry with an aliased voice
    manifest = write_manifest(own_voice.model_path.parent,
                              [manifest_entry(own_voice, aliases=["Small"])])
    registry = VoiceRegistry(manifest_specs(manifest), loader=load_voice, default="TINY")
    # When it is looked up by id, alias, any case, or no name
    # Then each finds the same voice
    for name in ("tiny", "TINY", "small", "sMaLl", " tiny ", None, ""):
        assert registry.get(name).id == "tiny"


def test_unknown_voice_lists_the_known_ones(registry: VoiceRegistry) -> None:
    # Given the registry of the tiny voices
    # When an unknown name is asked for
    with pytest.raises(UnknownVoice) as info:
        registry.get("nobody")
    # Then UnknownVoice (404) says which voices exist
    assert info.value.http_status == 404
    assert "multi" in info.value.message and "tiny" in info.value.message


# --- loading, digests, status -------------------------------------------------------------------


def test_load_builds_a_voice_from_config_and_model(registry: VoiceRegistry) -> None:
    # Given a registry
    # When the default voice is loaded
    voice = registry.load(None)
    assert isinstance(voice, PiperVoice)  # a Piper voice (its family's adapter)
    # Then it has the config's sample rate, hop length and espeak voice
    assert voice.spec.id == "tiny"
    assert voice.sample_rate == SAMPLE_RATE
    assert voice.model.hop_length == HOP_LENGTH
    assert voice.phonemizer.espeak_voice == "en-us"
    # And loading it again returns the same object
    assert registry.load("TINY") is voice


def test_wrong_manifest_digest_refuses_to_load(own_voice: VoiceFiles) -> None:
    # Given a manifest whose sha256 does not match the model file
    manifest = write_manifest(own_voice.model_path.parent,
                              [manifest_entry(own_voice, sha256="0" * 64)])
    loader = CountingLoader()
    registry = VoiceRegistry(manifest_specs(manifest), loader=loader, default="tiny")
    # When the voice is loaded
    with pytest.raises(DigestMismatch) as info:
        registry.load("tiny")
    # Then DigestMismatch (a 503 VoiceError) is raised before the model is even read
    assert isinstance(info.value, VoiceError)
    assert "000000000000" in info.value.message
    assert loader.calls == []
    assert registry.loaded() == []
    assert registry.status(registry.get("tiny")) == "mismatch"


def test_a_model_changed_after_registration_is_caught(own_voice: VoiceFiles) -> None:
    # Given a verified voice
    digest = file_sha256(own_voice.model_path)
    manifest = write_manifest(own_voice.model_path.parent,
                              [manifest_entry(own_voice, sha256=digest)])
    registry = VoiceRegistry(manifest_specs(manifest), loader=load_voice, default="tiny")
    spec = registry.get("tiny")
    assert registry.status(spec) == "verified"
    # When the file is replaced by a different one
    own_voice.model_path.write_bytes(own_voice.model_path.read_bytes()[:-10])
    # Then the digest is computed afresh and the voice is a mismatch
    assert registry.digest(spec) != digest
    assert registry.status(spec) == "mismatch"
    with pytest.raises(DigestMismatch):
        registry.load("tiny")


@pytest.mark.parametrize("missing", ["model", "config"])
def test_missing_files_are_voice_files_missing(own_voice: VoiceFiles, missing: str) -> None:
    # Given a discovered voice whose model or config file is then deleted
    registry = VoiceRegistry(discover_specs(own_voice.model_path.parent), loader=load_voice,
                             default="tiny")
    spec = registry.get("tiny")
    (own_voice.model_path if missing == "model" else own_voice.config_path).unlink()
    # When it is loaded, hashed or checked
    # Then each says the files are missing
    with pytest.raises(VoiceFilesMissing):
        registry.load("tiny")
    with pytest.raises(VoiceFilesMissing):
        spec.require_files()
    if missing == "model":
        with pytest.raises(VoiceFilesMissing):
            registry.digest(spec)
    assert registry.status(spec) == "missing"


def test_status_and_model_digest(own_voice: VoiceFiles, voices_dir: Path) -> None:
    # Given a manifest voice with the right digest and a discovered one without a digest
    digest = file_sha256(own_voice.model_path)
    manifest = write_manifest(own_voice.model_path.parent,
                              [manifest_entry(own_voice, sha256=digest)])
    specs = manifest_specs(manifest) + [s for s in discover_specs(voices_dir) if s.id == "multi"]
    registry = VoiceRegistry(specs, loader=load_voice, default="tiny")
    tiny, multi = registry.get("tiny"), registry.get("multi")
    # Then their statuses are verified and unverified
    assert registry.status(tiny) == "verified"
    assert registry.status(multi) == "unverified"
    # And the digest that keys their audio is the manifest's, else the file's own
    assert registry.model_digest(tiny) == digest
    assert registry.model_digest(multi) == file_sha256(voices_dir / "multi.onnx")
    assert registry.model_digest(tiny) != registry.model_digest(multi)


def test_at_most_max_loaded_voices_stay_loaded(voices_dir: Path) -> None:
    # Given a registry that keeps one voice loaded
    loader = CountingLoader()
    registry = VoiceRegistry(discover_specs(voices_dir), loader=loader, default="tiny",
                             max_loaded=1)
    # When two voices are used in turn
    registry.load("tiny")
    registry.load("tiny")
    registry.load("multi")
    # Then only the last one stays loaded, and going back loads the first again
    assert registry.loaded() == ["multi"]
    registry.load("tiny")
    assert registry.loaded() == ["tiny"]
    assert loader.calls == ["tiny", "multi", "tiny"]


def test_the_least_recently_used_voice_is_unloaded_first(tmp_path: Path) -> None:
    # Given three voices and room for two
    for name in ("a", "b", "c"):
        write_voice(tmp_path, name)
    loader = CountingLoader()
    registry = VoiceRegistry(discover_specs(tmp_path), loader=loader, default="a", max_loaded=2)
    # When a and b are loaded, a is used again, then c is loaded
    registry.load("a")
    registry.load("b")
    registry.load("a")
    assert registry.loaded() == ["b", "a"]  # least recently used first
    registry.load("c")
    # Then b, the least recently used, was unloaded and a stayed
    assert registry.loaded() == ["a", "c"]
    registry.load("a")
    assert loader.calls == ["a", "b", "c"]


def shared_graph_specs(voices_dir: Path, count: int) -> list[VoiceSpec]:
    """``count`` voices of a family whose voices share one model (as Kokoro's share its graph)."""
    return [VoiceSpec(id=f"k{n}", model_path=voices_dir / "tiny.onnx",
                      config_path=voices_dir / "tiny.onnx.json", family="kokoro", style=f"k{n}")
            for n in range(count)]


def test_cycling_voices_of_one_shared_model_keeps_the_default_voice_loaded(voices_dir: Path) -> None:
    # Given the default voice and three voices sharing one model, with room for two models
    loader = CountingLoader()
    specs = [s for s in discover_specs(voices_dir) if s.id == "tiny"] + shared_graph_specs(voices_dir, 3)
    registry = VoiceRegistry(specs, loader=loader, default="tiny", max_loaded=2)
    # When requests cycle through the shared model's voices, a default-voice request between each
    for _ in range(3):
        for name in ("k0", "k1", "k2"):
            registry.load(name)
            registry.load(None)
    # Then each voice was loaded once: the shared voices count as one model, so the default stayed
    assert sorted(loader.calls) == ["k0", "k1", "k2", "tiny"]
    assert set(registry.loaded()) == {"tiny", "k0", "k1", "k2"}


def test_a_voice_in_use_is_never_unloaded_and_the_bound_holds_once_it_is_let_go(voices_dir: Path) -> None:
    # Given room for one model, and a request holding the tiny voice
    loader = CountingLoader()
    registry = VoiceRegistry(discover_specs(voices_dir), loader=loader, default="tiny", max_loaded=1)
    with registry.using("tiny") as voice:
        # When another voice is loaded meanwhile
        registry.load("multi")
        # Then the voice in use stays loaded (the bound is passed while it is held)
        assert registry.load("tiny") is voice and registry.loaded() == ["multi", "tiny"]
    # And once the request lets it go, the bound holds again
    assert len(registry.loaded()) == 1
    assert loader.calls == ["tiny", "multi"]


# --- speakers -----------------------------------------------------------------------------------


@pytest.fixture
def multi_spec(voices_dir: Path) -> VoiceSpec:
    return next(s for s in discover_specs(voices_dir) if s.id == "multi")


@pytest.fixture
def single_spec(voices_dir: Path) -> VoiceSpec:
    return next(s for s in discover_specs(voices_dir) if s.id == "tiny")


@pytest.mark.parametrize(
    ("speaker", "number"),
    [("alice", 0), ("bob", 1), ("carol", 2), (0, 0), (2, 2), ("1", 1), (None, 0), ("", 0)],
)
def test_multi_speaker_voice_resolves_names_and_numbers(
    multi_spec: VoiceSpec, speaker: str | int | None, number: int
) -> None:
    # Given the three-speaker voice
    # When a speaker is named, numbered or left out
    # Then it maps to the model's speaker id (the first speaker by default)
    assert resolve_speaker(multi_spec, speaker) == number


@pytest.mark.parametrize("speaker", ["dave", "Alice", 3, -1, "7", "1.5"])
def test_multi_speaker_voice_rejects_unknown_speakers(
    multi_spec: VoiceSpec, speaker: str | int
) -> None:
    # Given the three-speaker voice
    # When an unknown name or an out-of-range number is asked for
    # Then UnknownSpeaker is raised
    with pytest.raises(UnknownSpeaker):
        resolve_speaker(multi_spec, speaker)


def test_single_speaker_voice_takes_no_speaker(single_spec: VoiceSpec) -> None:
    # Given a one-speaker voice
    # Then no speaker, or speaker 0, means no speaker id at all
    for speaker in (None, "", 0, "0"):
        assert resolve_speaker(single_spec, speaker) is None
    # And any other speaker is an error
    for speaker in (1, "alice"):
        with pytest.raises(UnknownSpeaker):
            resolve_speaker(single_spec, speaker)


def test_loaded_voice_resolves_speakers_like_its_spec(registry: VoiceRegistry) -> None:
    # Given the loaded three-speaker voice
    # Then it resolves speakers as its spec does
    voice = registry.load("multi")
    assert isinstance(voice, PiperVoice)
    assert voice.model.multi_speaker is True
    assert voice.speaker_id("carol") == 2
    with pytest.raises(UnknownSpeaker):
        voice.speaker_id("zed")


def test_a_voice_changed_on_disk_is_reloaded_and_changes_the_digest(tmp_path: Path) -> None:
    # Given a drop-in voice that is loaded
    from tests.conftest import load_voice
    from tests.support.tiny_voice import write_voice

    write_voice(tmp_path, "swap")
    registry = VoiceRegistry(discover_specs(tmp_path), loader=load_voice, default="swap")
    spec = registry.get("swap")
    first, digest = registry.load("swap"), registry.voice_digest(spec)
    assert registry.load("swap") is first
    # When its config is replaced on disk (a new version of the voice)
    config = spec.config_path.read_text().replace('"noise_scale"', '"noise_scale_old"', 1)
    spec.config_path.write_text(config + " ")
    # Then the next load reloads it, and its digest (part of every cache key) changes
    assert registry.load("swap") is not first
    assert registry.voice_digest(spec) != digest


# --- loading never blocks the readers -----------------------------------------------------------


class SlowLoader:
    """A loader that blocks (as a TensorRT engine build does) until the test lets it finish."""

    def __init__(self, slow: str) -> None:
        self.slow = slow
        self.started = threading.Event()
        self.finish = threading.Event()
        self.calls: list[str] = []

    def __call__(self, spec: VoiceSpec) -> PiperVoice:
        self.calls.append(spec.id)
        if spec.id == self.slow:
            self.started.set()
            assert self.finish.wait(30), "the test never let the load finish"
        return load_voice(spec)


def answers_within(call: Any, seconds: float = 2.0) -> Any:
    """``call()``'s result, failing the test if it does not return within ``seconds``."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{call} waited for the voice being loaded"
    return result[0]


def test_providers_and_loaded_answer_while_a_voice_loads(voices_dir: Path) -> None:
    # Given a worker with tiny loaded, and multi loading slowly in a request thread
    loader = SlowLoader("multi")
    registry = VoiceRegistry(discover_specs(voices_dir), loader=loader, default="tiny")
    registry.load("tiny")
    loading = threading.Thread(target=registry.load, args=("multi",), daemon=True)
    loading.start()
    assert loader.started.wait(10)
    try:
        # When the heartbeat asks where voices run, meanwhile
        # Then it is answered at once, truthfully: tiny is loaded, multi not yet
        assert answers_within(registry.providers) == {"tiny": "CPUExecutionProvider"}
        assert answers_within(registry.loaded) == ["tiny"]
        # And the loaded voice keeps serving, and its digest is read, without waiting
        assert answers_within(lambda: registry.load("tiny")).spec.id == "tiny"
        assert answers_within(lambda: registry.voice_digest(registry.get("tiny")))
    finally:
        loader.finish.set()
        loading.join(10)
    # Then, once loaded, multi is listed too
    assert registry.providers() == {"tiny": "CPUExecutionProvider", "multi": "CPUExecutionProvider"}


def test_a_voice_is_loaded_once_however_many_threads_ask_for_it(voices_dir: Path) -> None:
    # Given multi loading slowly, and four more threads asking for it meanwhile
    loader = SlowLoader("multi")
    registry = VoiceRegistry(discover_specs(voices_dir), loader=loader, default="tiny")
    got: list[LoadedVoice] = []
    threads = [threading.Thread(target=lambda: got.append(registry.load("multi")), daemon=True)
               for _ in range(5)]
    threads[0].start()
    assert loader.started.wait(10)
    for thread in threads[1:]:
        thread.start()
    # When another voice is asked for meanwhile, it loads without waiting for multi
    assert answers_within(lambda: registry.load("tiny")).spec.id == "tiny"
    loader.finish.set()
    for thread in threads:
        thread.join(10)
    # Then multi was loaded once and every thread got the same voice
    assert loader.calls.count("multi") == 1
    assert len(got) == 5 and all(voice is got[0] for voice in got)


def test_a_failed_load_leaves_the_voice_unloaded_and_is_tried_again(voices_dir: Path) -> None:
    attempts: list[str] = []

    def flaky(spec: VoiceSpec) -> PiperVoice:
        attempts.append(spec.id)
        if len(attempts) == 1:
            raise ModelLoadError("first try fails")
        return load_voice(spec)

    registry = VoiceRegistry(discover_specs(voices_dir), loader=flaky, default="tiny")
    with pytest.raises(ModelLoadError):
        registry.load("tiny")
    assert registry.loaded() == [] and registry.providers() == {}
    assert registry.load("tiny").spec.id == "tiny"
    assert attempts == ["tiny", "tiny"]
