"""The Helm chart (``deploy/helm/tts-queue``), tested without a cluster (none can run here):

- it renders (helm-python-sdk, Helm v4 as a library, no binary) with the default values and with
  each documented values file (``examples/``);
- every rendered object validates against the Kubernetes schemas (kubernetes-validate, the
  newest Kubernetes version it knows) and each ScaledObject against KEDA's own models
  (cloudcoil-models-keda, which follows KEDA 2.16);
- the objects are the ones documented: ``<release>-api`` with a Service, a PodDisruptionBudget and
  probes on ``/healthz`` (not ``/readyz``), ``<release>-worker-cpu`` and ``-gpu`` (the GPU and its
  node), exactly one ``<release>-beat`` (Recreate), the migrations as a pre-install/upgrade hook,
  the ScaledObjects on the backlog gauge, and (when enabled) ``<release>-wyoming`` with a Service
  on its port and its key from the Secret;
- docker-compose.yml and the chart agree on images, commands and settings.

Nothing here was deployed: what a cluster, KEDA or an ingress would do with these objects is not
tested.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import ROOT

CHART = ROOT / "deploy" / "helm" / "tts-queue"
EXAMPLES = sorted((CHART / "examples").glob("*.yaml"))
RELEASE = "tts"


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every object the chart renders for ``values`` (release ``tts``), in template order."""
    from helm_python.chart import Chart

    rendered = Chart.load(CHART).render(values or {}, name=RELEASE, namespace="default", is_install=True)
    return [doc for _, text in sorted(rendered.items()) for doc in yaml.safe_load_all(text) if doc]


def by_name(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    assert isinstance(only, dict)
    return only


def env_of(deployment: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(deployment)["env"]}


@pytest.mark.parametrize("values_file", [None, *EXAMPLES], ids=lambda p: p.name if p else "defaults")
def test_the_chart_renders_and_every_object_validates(values_file: Path | None) -> None:
    import kubernetes_validate
    from cloudcoil.models.keda.v1alpha1 import ScaledObject

    values = yaml.safe_load(values_file.read_text()) if values_file else {}
    objects = render(values)
    assert objects
    version = kubernetes_validate.utils.latest_version()
    for obj in objects:
        if obj["kind"] == "ScaledObject":
            ScaledObject.model_validate(obj)  # KEDA's own schema (pydantic): raises on a bad field
        else:
            kubernetes_validate.validate(obj, version, strict=True)
    # Every Deployment is the release's, and its selector matches its pods
    for name, deployment in by_name(objects, "Deployment").items():
        assert name.startswith(f"{RELEASE}-")
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_the_objects_are_the_documented_ones() -> None:
    objects = render(yaml.safe_load((CHART / "examples" / "gpu.yaml").read_text()))
    deployments = by_name(objects, "Deployment")
    assert set(deployments) == {"tts-api", "tts-worker-cpu", "tts-worker-gpu", "tts-beat",
                                "tts-wyoming"}  # external Redis
    api = deployments["tts-api"]
    probes = container(api)
    assert probes["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert probes["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert "tts-api" in by_name(objects, "Service") and "tts-api" in by_name(objects, "PodDisruptionBudget")
    # exactly one scheduler, never two during an upgrade
    beat = deployments["tts-beat"]
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"]["type"] == "Recreate"
    # the GPU worker asks for a GPU on a GPU node
    gpu = deployments["tts-worker-gpu"]
    assert container(gpu)["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert gpu["spec"]["template"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert env_of(gpu)["TTS_WORKER_POOL"] == "gpu" and env_of(gpu)["TTS_PROVIDERS"] == "auto"
    # workers have a grace period longer than the shutdown budget they are given
    for name, worker in deployments.items():
        if "worker" in name:
            budget = float(env_of(worker)["TTS_SHUTDOWN_BUDGET_S"])
            assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > budget > 0
    # the migrations run before the pods, as a hook
    (job,) = by_name(objects, "Job").values()
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert container({"spec": {"template": job["spec"]["template"]}})["command"] == ["tts-queue", "migrate"]
    # the broker is the external one named, and the database URL comes from the Secret
    assert env_of(api)["TTS_REDIS_URL"] == "redis://redis.internal:6379/0"
    assert env_of(api)["TTS_DATABASE_URL"]["secretKeyRef"]["name"] == "tts-secrets"
    # the ScaledObjects scale each worker pool on its backlog in audio seconds, the CPU pool from 1
    scaled = by_name(objects, "ScaledObject")
    assert set(scaled) == {"tts-worker-cpu", "tts-worker-gpu"}
    for name, obj in scaled.items():
        assert obj["spec"]["scaleTargetRef"]["name"] == name
        (trigger,) = obj["spec"]["triggers"]
        assert trigger["type"] == "prometheus" and "tts_backlog_audio_seconds" in trigger["metadata"]["query"]
        assert "max by (lane)" in trigger["metadata"]["query"]  # each API replica reports the same count
    assert scaled["tts-worker-cpu"]["spec"]["minReplicaCount"] >= 1
    # the GPU pool goes to zero, woken by its backlog: the API accepts its work with no worker
    assert scaled["tts-worker-gpu"]["spec"]["minReplicaCount"] == 0
    assert scaled["tts-worker-gpu"]["spec"]["triggers"][0]["metadata"]["activationThreshold"] == "1"
    assert env_of(api)["TTS_SCALE_FROM_ZERO"] == "gpu"
    # and the autoscaler owns the workers' count: an upgrade does not reset it
    assert all("replicas" not in deployments[name]["spec"] for name in scaled)
    assert scaled["tts-worker-cpu"]["spec"]["triggers"][0]["metadata"]["threshold"] == "1050"
    # the Wyoming server listens on its port behind a Service, its key from the Secret
    wyoming = container(deployments["tts-wyoming"])
    assert wyoming["command"] == ["tts-queue", "wyoming", "--port", "10200"]
    assert env_of(deployments["tts-wyoming"])["TTS_WYOMING_KEY"]["secretKeyRef"]["name"] == "tts-secrets"
    assert wyoming["readinessProbe"]["tcpSocket"]["port"] == "wyoming"
    assert by_name(objects, "Service")["tts-wyoming"]["spec"]["ports"][0]["port"] == 10200
    # and without KEDA there is none, nor a Wyoming server unless enabled; with the chart's Redis,
    # its Deployment and Service
    defaults = render()
    assert not by_name(defaults, "ScaledObject") and "tts-wyoming" not in by_name(defaults, "Deployment")
    assert "tts-redis" in by_name(defaults, "Deployment") and "tts-redis" in by_name(defaults, "Service")
    assert env_of(by_name(defaults, "Deployment")["tts-api"])["TTS_REDIS_URL"] == "redis://tts-redis:6379/0"


def test_compose_and_the_chart_agree_on_images_commands_and_settings() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    deployments = by_name(render(yaml.safe_load((CHART / "examples" / "gpu.yaml").read_text())), "Deployment")
    redis = by_name(render(), "Deployment")["tts-redis"]
    pairs = {"api": "tts-api", "worker-cpu": "tts-worker-cpu", "worker-gpu": "tts-worker-gpu",
             "scheduler": "tts-beat", "wyoming": "tts-wyoming"}
    for service, name in pairs.items():
        # the same image and the same command
        assert container(deployments[name])["image"] == services[service]["image"], service
        assert container(deployments[name])["command"] == services[service]["command"], service
        # every setting compose gives the service, the chart gives too (values: the same where
        # compose fixes one rather than passing the host's through)
        chart_env = env_of(deployments[name])
        for key, value in services[service]["environment"].items():
            assert key in chart_env, (service, key)
            passed = "${" in str(value) or key in ("TTS_REDIS_URL", "TTS_DATABASE_URL")
            if isinstance(value, str) and not passed:
                assert chart_env[key] == value, (service, key)
    assert container(redis)["image"] == services["redis"]["image"]
    assert container(redis)["command"] == services["redis"]["command"]
    assert services["migrate"]["command"] == ["tts-queue", "migrate"]


def test_a_grace_period_not_longer_than_the_shutdown_budget_is_refused() -> None:
    # past the grace Kubernetes kills the worker before it could hand back what still runs
    with pytest.raises(Exception, match="longer than shutdownBudgetSeconds"):
        render({"shutdownBudgetSeconds": 60, "terminationGracePeriodSeconds": 60})


def test_the_cpu_pool_cannot_scale_to_zero() -> None:
    # webhooks and the sweeps' work need a worker: a CPU pool at zero would never deliver them
    with pytest.raises(Exception, match="keda.cpu.minReplicas must be at least 1"):
        render({"keda": {"enabled": True, "cpu": {"minReplicas": 0}}})
