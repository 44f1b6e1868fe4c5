"""The Helm chart (helm/binlog-relay): lint, Kubernetes API schemas, structure, and the relay's
own configuration check on what a pod would really read.

For each value set: `helm lint --strict`; `helm template` piped into `kubernetes-validate --strict`
(the Prometheus Operator's ServiceMonitor/PrometheusRule are not in its schemas: checked by
structure here); then the init container's script is run the way the kubelet would run it (its
volumes filled from the rendered ConfigMap and Secret, its environment resolved) with the real
`binlog-relay check-config`, and the file it assembles is loaded with relay.config, so the chart
and the relay's configuration schema cannot drift apart.

helm comes from .tools/bin/helm (scripts/install-tools.sh) or PATH; kubernetes-validate from
PyPI. A missing tool fails the tests, it does not skip them.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from relay.archive.objectformat import DEFAULT_LEVEL
from relay.config import iter_options, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "binlog-relay"
INSTALL_HINT = "run `bash scripts/install-tools.sh` (scripts/test.sh does)"
NAMESPACE = "relay-ns"
RELEASE = "rel"
FULLNAME = "rel-binlog-relay"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and a current one; both are
# shipped by the pinned kubernetes-validate.
K8S_VERSIONS = ("1.25.0", "1.33.0")
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
UID = 10001

# The relay keys the chart sets itself (README.md of the chart); values.schema.json rejects them.
CHART_MANAGED = {
    "data_dir", "users", "upstream.password", "upstream.password_file",
    "upstream.ssl.ca", "upstream.ssl.cert", "upstream.ssl.key", "listen.ssl.cert", "listen.ssl.key",
    "archive.access_key_id_file", "archive.secret_access_key_file", "archive.encryption_key_file",
    "archive.old_encryption_key_files",
}

# ------------------------------------------------------------------ value sets

EXISTING_SECRET = {  # what a user of auth.existingSecret would create (keys as the chart expects)
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "relay-credentials", "namespace": NAMESPACE},
    "type": "Opaque",
    "stringData": {
        "upstream-password": "from-the-existing-secret",
        "users.yaml": "users:\n  - name: repl\n    password_hash: \"*14E65567ABDB5135D0CFD9A70B3032C179A49EE7\"\n"
                      "  - name: analytics\n    password: also-secret\n",
    },
}



def _kek(seed: str) -> str:
    """A key-encryption key as a Secret holds it: 64 hex digits (openssl rand -hex 32), newline-ended."""
    return hashlib.sha256(seed.encode()).hexdigest() + "\n"


ARCHIVE_SECRETS = [  # what a user of archive.credentialsSecret / encryptionKeySecret would create
    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "archive-credentials", "namespace": NAMESPACE},
     "type": "Opaque", "stringData": {"AWS_ACCESS_KEY_ID": "AKIAARCHIVEKEYID0001",
                                      "AWS_SECRET_ACCESS_KEY": "archive/secret+access/key-from-the-secret"}},
    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "archive-keys", "namespace": NAMESPACE},
     "type": "Opaque", "stringData": {"current": _kek("current"), "2024": _kek("2024")}},
    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "archive-old-key", "namespace": NAMESPACE},
     "type": "Opaque", "stringData": {"key": _kek("older")}},
]

VALUE_SETS: dict[str, dict[str, Any]] = {
    # The chart's defaults plus the one value without a default.
    "defaults": {"config": {"upstream": {"host": "mariadb-primary.db.svc.cluster.local"}}},
    # Three pods, credentials from an existing Secret, monitoring on, TLS to the primary.
    "ha-monitoring": {
        "replicaCount": 3,
        "config": {
            "server_id": 4000,
            "upstream": {
                "host": "10.0.0.5", "port": 3307, "user": "relay",
                "start": {"file": "mariadb-bin.000042", "position": 4},
                "ignore_server_ids": [1, 2, 3999, 4003],
                "heartbeat_period": 5, "reconnect": {"initial_delay": 1, "max_delay": 60},
                "ssl": {"mode": "verify_identity"},
            },
            "logging": {"level": "debug", "format": "text"},
        },
        "auth": {"existingSecret": "relay-credentials"},
        "tls": {"upstream": {"secretName": "primary-ca", "caKey": "ca.pem", "clientCert": True}},
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True, "lagThresholdSeconds": 60, "diskFreeRatio": 0.15, "for": "10m"},
        "podDisruptionBudget": {"maxUnavailable": 1},
        "extraEnv": [{"name": "BINLOG_RELAY_LISTEN_MAX_CONNECTIONS", "value": "200"}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100,
            "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "binlog-relay"}}},
        }]}},
    },
    # Candidate primaries for failover, semi-sync, the retention grace for replicas away.
    "failover": {
        "config": {
            "upstream": {"host": "", "hosts": [{"host": "db-0.db", "port": 3306}, {"host": "db-1.db"}],
                         "semi_sync": True},
            "storage": {"retention": {"replica_grace": "2h"}},
        },
    },
    # TLS for replicas (required), retention, chart-created Secret with both kinds of users,
    # custom resources and storage.
    "tls-retention": {
        "config": {
            "server_id": 4294967295,
            "upstream": {"host": "primary", "ssl": {"mode": "required"}},
            "listen": {"port": 3310, "max_connections": 50, "ssl": {"require": True}},
            "metrics": {"port": 9200},
            "storage": {"sync": "interval", "sync_interval_ms": 20,
                        "retention": {"max_size": "80G", "max_age": "14d", "min_files": 5}},
        },
        "auth": {
            # YAML-ish characters: the env override must take the password verbatim.
            "upstreamPassword": "0123: #not-a-comment",
            "users": [
                {"name": "repl", "password_hash": "*14E65567ABDB5135D0CFD9A70B3032C179A49EE7"},
                {"name": "mysql8", "password": "caching-sha2-needs-the-password"},
            ],
        },
        "tls": {"listen": {"secretName": "relay-tls"}},
        "service": {"type": "LoadBalancer", "port": 3306, "sessionAffinity": "ClientIP"},
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "4", "memory": "2Gi"}},
        "persistence": {"size": "100Gi", "storageClassName": "fast-ssd",
                        "retentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Delete"}},
        "podDisruptionBudget": {"enabled": False},
        "terminationGracePeriodSeconds": 30,
    },
    # The archive on an S3-compatible store, shared by two pods, credentials and keys (current and
    # two old ones, one from the current key's Secret) from existing Secrets, its alerts with one
    # bound changed.
    "archive": {
        "replicaCount": 2,
        "config": {
            "upstream": {"host": "primary"},
            "archive": {"url": "s3://relay-archive/prod/relay", "endpoint_url": "http://minio.storage.svc:9000",
                        "region": "eu-west-1", "compression_level": 6, "writer_lease": "2m",
                        "retention": {"max_age": "90d", "max_files": 5000}},
        },
        "archive": {
            "credentialsSecret": {"name": "archive-credentials", "accessKeyIdKey": "AWS_ACCESS_KEY_ID",
                                  "secretAccessKeyKey": "AWS_SECRET_ACCESS_KEY"},
            "encryptionKeySecret": {"name": "archive-keys", "key": "current"},
            "oldEncryptionKeySecrets": [{"name": "archive-keys", "key": "2024"},
                                        {"name": "archive-old-key", "key": "key"}],
            "verify": {"schedule": "30 3 * * 0", "scratchSize": "3Gi", "resources": {"limits": {"memory": "512Mi"}}},
        },
        "prometheusRule": {"enabled": True, "archive": {"lagFiles": 25, "storeDownFor": "5m"}},
    },
}


# ------------------------------------------------------------------ tools


@pytest.fixture(scope="session")
def kubernetes_validate() -> str:
    beside = Path(sysconfig.get_path("scripts")) / "kubernetes-validate"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("kubernetes-validate")
    if found is None:
        pytest.fail(f"kubernetes-validate not found next to {sys.executable} or on PATH: {INSTALL_HINT}",
                    pytrace=False)
    return found


def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=120, **kwargs)


def values_file(tmp_path_factory: pytest.TempPathFactory, values: dict[str, Any]) -> Path:
    path = tmp_path_factory.mktemp("values") / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def helm_template(helm: str, values_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run([helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", str(values_path), *extra])


class Rendered:
    """The documents of one `helm template`, and lookups by kind/name."""

    def __init__(self, name: str, values: dict[str, Any], text: str) -> None:
        self.name, self.values, self.text = name, values, text
        self.docs = [doc for doc in yaml.safe_load_all(text) if doc]

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [doc for doc in self.docs if doc["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [doc for doc in self.all(kind) if name is None or doc["metadata"]["name"] == name]
        assert len(found) == 1, f"{self.name}: expected one {kind} {name or ''}, found {len(found)}"
        return found[0]

    def secrets(self) -> dict[str, dict[str, str]]:
        """Secret name -> decoded data: the rendered ones and the user's (existingSecret, the archive's)."""
        docs = self.all("Secret")
        if self.values.get("auth", {}).get("existingSecret"):
            docs = docs + [EXISTING_SECRET]
        if self.values.get("archive"):
            docs = docs + ARCHIVE_SECRETS
        result = {}
        for doc in docs:
            data = {k: base64.b64decode(v).decode() for k, v in (doc.get("data") or {}).items()}
            data.update(doc.get("stringData") or {})
            result[doc["metadata"]["name"]] = data
        return result

    @property
    def statefulset(self) -> dict[str, Any]:
        return self.one("StatefulSet", FULLNAME)

    @property
    def pod_spec(self) -> dict[str, Any]:
        return self.statefulset["spec"]["template"]["spec"]

    @property
    def auth_secret(self) -> str:
        return self.values.get("auth", {}).get("existingSecret") or FULLNAME

    def archive_files(self) -> dict[str, str]:
        """File name -> content of the archive's Secrets volume as the kubelet fills it ({}: none)."""
        volume = next((v for v in self.pod_spec["volumes"] if v["name"] == "archive-secrets"), None)
        if volume is None:
            return {}
        secrets, files = self.secrets(), {}
        for source in volume["projected"]["sources"]:
            ref = source["secret"]
            assert not ref.get("optional"), "a missing archive Secret must keep the pod from starting"
            for item in ref["items"]:
                assert item["path"] not in files, item
                files[item["path"]] = secrets[ref["name"]][item["key"]]
        return files

    def container(self, name: str) -> dict[str, Any]:
        spec = self.pod_spec
        return next(c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name)


@pytest.fixture(scope="module", params=list(VALUE_SETS))
def value_set(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    return request.param, values_file(tmp_path_factory, VALUE_SETS[request.param])


@pytest.fixture(scope="module")
def rendered(helm: str, value_set: tuple[str, Path]) -> Rendered:
    name, path = value_set
    result = helm_template(helm, path)
    assert result.returncode == 0, f"helm template ({name}) failed:\n{result.stderr}"
    return Rendered(name, VALUE_SETS[name], result.stdout)


# ------------------------------------------------------------------ helm lint, API schemas


def test_helm_lint_strict(helm: str, value_set: tuple[str, Path]) -> None:
    name, path = value_set
    result = run([helm, "lint", "--strict", str(CHART), "--namespace", NAMESPACE, "-f", str(path)])
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"helm lint --strict ({name}):\n{output}"
    assert "[WARNING]" not in output and "[ERROR]" not in output, output


@pytest.mark.parametrize("k8s_version", K8S_VERSIONS)
def test_manifests_match_kubernetes_api(kubernetes_validate: str, rendered: Rendered, k8s_version: str) -> None:
    docs = [doc for doc in rendered.docs if (doc["apiVersion"], doc["kind"]) not in CRD_KINDS]
    result = run([kubernetes_validate, "--strict", "-k", k8s_version, "-"], input=yaml.safe_dump_all(docs))
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"kubernetes-validate {k8s_version} ({rendered.name}):\n{output}"
    # Every document was checked: none of an unknown kind or API version slipped through.
    assert "WARN" not in output and "ERROR" not in output, output
    assert output.count("passed for resource") == len(docs), output


def test_kubernetes_validate_is_really_checking(kubernetes_validate: str, rendered: Rendered) -> None:
    # Guards the test above: a field the API does not know must fail in --strict mode.
    broken = copy.deepcopy(rendered.statefulset)
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsNonRot"] = True
    result = run([kubernetes_validate, "--strict", "-k", K8S_VERSIONS[0], "-"], input=yaml.safe_dump(broken))
    assert result.returncode != 0 and "runAsNonRot" in result.stdout + result.stderr


# ------------------------------------------------------------------ structure of the objects


def test_objects_present(rendered: Rendered) -> None:
    kinds = sorted((doc["kind"], doc["metadata"]["name"]) for doc in rendered.docs)
    values = rendered.values
    expected = {
        ("ConfigMap", FULLNAME), ("Service", FULLNAME), ("Service", f"{FULLNAME}-headless"),
        ("Service", f"{FULLNAME}-metrics"), ("ServiceAccount", FULLNAME), ("StatefulSet", FULLNAME),
    }
    if not values.get("auth", {}).get("existingSecret"):
        expected.add(("Secret", FULLNAME))
    if values.get("podDisruptionBudget", {}).get("enabled", True):
        expected.add(("PodDisruptionBudget", FULLNAME))
    if values.get("serviceMonitor", {}).get("enabled"):
        expected.add(("ServiceMonitor", FULLNAME))
    if values.get("prometheusRule", {}).get("enabled"):
        expected.add(("PrometheusRule", FULLNAME))
    if values.get("archive", {}).get("verify", {}).get("schedule"):
        expected.add(("CronJob", f"{FULLNAME}-archive-verify"))
    assert set(kinds) == expected
    assert all(doc["metadata"].get("namespace", NAMESPACE) == NAMESPACE for doc in rendered.docs)


def test_statefulset(rendered: Rendered) -> None:
    sts = rendered.statefulset["spec"]
    values = rendered.values
    assert sts["replicas"] == values.get("replicaCount", 1)
    assert sts["serviceName"] == f"{FULLNAME}-headless"
    headless = rendered.one("Service", f"{FULLNAME}-headless")["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True

    # One PVC per pod, mounted at the relay's data_dir.
    (claim,) = sts["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    persistence = values.get("persistence", {})
    assert claim["spec"]["resources"]["requests"]["storage"] == persistence.get("size", "20Gi")
    assert claim["spec"].get("storageClassName") == persistence.get("storageClassName")
    relay = rendered.container("relay")
    assert {"name": "data", "mountPath": "/var/lib/binlog-relay"} in relay["volumeMounts"]

    spec = rendered.pod_spec
    assert 5 <= spec["terminationGracePeriodSeconds"] <= 60
    assert spec["automountServiceAccountToken"] is False
    # The image's entrypoint, on the file the init container assembles.
    assert "command" not in relay
    assert relay["args"] == ["run", "--config", "/run/binlog-relay/config.yaml"]
    assert relay["resources"] == values.get("resources", relay["resources"])
    assert relay["resources"]["requests"] and relay["resources"]["limits"]


def test_security_context(rendered: Rendered) -> None:
    pod = rendered.pod_spec["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == UID and pod["fsGroup"] == UID
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in rendered.pod_spec["initContainers"] + rendered.pod_spec["containers"]:
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] == UID, container["name"]
        assert context["readOnlyRootFilesystem"] is True, container["name"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, container["name"]
        # With a read-only root, everything written goes to a volume.
        assert any(m["mountPath"] == "/run/binlog-relay" for m in container["volumeMounts"])


def test_probes_and_ports(rendered: Rendered) -> None:
    relay = rendered.container("relay")
    ports = {port["name"]: port["containerPort"] for port in relay["ports"]}
    config = rendered.values["config"]
    assert ports == {"mysql": config.get("listen", {}).get("port", 3306),
                     "metrics": config.get("metrics", {}).get("port", 9104)}
    assert relay["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert relay["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert relay["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}


def test_services_reach_the_pods(rendered: Rendered) -> None:
    pod_labels = rendered.statefulset["spec"]["template"]["metadata"]["labels"]
    selector = rendered.statefulset["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    port_names = {port["name"] for port in rendered.container("relay")["ports"]}
    for service in rendered.all("Service"):
        assert service["spec"]["selector"].items() <= pod_labels.items(), service["metadata"]["name"]
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names, service["metadata"]["name"]
    replicas = rendered.one("Service", FULLNAME)["spec"]["ports"]
    service_port = rendered.values.get("service", {}).get("port", 3306)
    assert [(p["name"], p["port"]) for p in replicas] == [("mysql", service_port)]
    metrics = rendered.one("Service", f"{FULLNAME}-metrics")["spec"]["ports"]
    assert [(p["name"], p["port"]) for p in metrics] == [("metrics", 9104)]
    for pdb in rendered.all("PodDisruptionBudget"):
        assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        assert pdb["spec"]["maxUnavailable"] == 1


def test_nothing_secret_outside_secrets(rendered: Rendered) -> None:
    configmap = rendered.one("ConfigMap", FULLNAME)
    config = yaml.safe_load(configmap["data"]["config.yaml"])
    assert "users" not in config and "server_id" not in config
    assert "password" not in config["upstream"] and "password_file" not in config["upstream"]
    not_secrets = "\n".join(yaml.safe_dump(doc) for doc in rendered.docs if doc["kind"] != "Secret")
    credentials = []
    for name, data in rendered.secrets().items():
        if name != rendered.auth_secret:  # the archive's: access key, secret key, encryption keys
            credentials.extend(value.strip() for value in data.values())
            continue
        credentials.append(data["upstream-password"])
        for user in yaml.safe_load(data["users.yaml"])["users"]:
            credentials.append(expected_password(data, user) or user["password_hash"])
    # The chart-created Secret keeps each password under a key of its own (mounted as a file, the
    # user's password_file): the users file, pasted into the configuration, holds none.
    if not rendered.values.get("auth", {}).get("existingSecret"):
        users = yaml.safe_load(rendered.secrets()[FULLNAME]["users.yaml"])["users"]
        assert all("password" not in user for user in users), users
    for credential in filter(None, credentials):
        assert credential not in not_secrets, "a credential outside the Secret"
    # The archive's configuration names files only, in the archive's Secrets volume.
    archive = config.get("archive") or {}
    paths = [archive.get(key) for key in ("access_key_id_file", "secret_access_key_file", "encryption_key_file")]
    for path in filter(None, paths + list(archive.get("old_encryption_key_files") or [])):
        assert os.path.dirname(path) == ARCHIVE_DIR, path
    assert set(rendered.archive_files()) == {os.path.basename(path) for path in filter(None, paths + list(
        archive.get("old_encryption_key_files") or []))}


def test_service_monitor(rendered: Rendered) -> None:
    monitors = rendered.all("ServiceMonitor")
    if not rendered.values.get("serviceMonitor", {}).get("enabled"):
        assert not monitors
        return
    (monitor,) = monitors
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    spec = monitor["spec"]
    selected = [svc for svc in rendered.all("Service")
                if spec["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()]
    assert [svc["metadata"]["name"] for svc in selected] == [f"{FULLNAME}-metrics"]
    assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = spec["endpoints"]
    assert endpoint["port"] in {p["name"] for p in selected[0]["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    assert re.fullmatch(r"\d+[smh]", endpoint["interval"])


def test_prometheus_rule(rendered: Rendered) -> None:
    rules_docs = rendered.all("PrometheusRule")
    options = rendered.values.get("prometheusRule", {})
    if not options.get("enabled"):
        assert not rules_docs
        return
    (doc,) = rules_docs
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    (group,) = doc["spec"]["groups"]
    rules = {rule["alert"]: rule for rule in group["rules"]}
    archive_on = bool(rendered.values["config"].get("archive", {}).get("url"))
    assert set(rules) == {"BinlogRelayDown", "BinlogRelayUpstreamDown", "BinlogRelayLagHigh",
                          "BinlogRelayDiskNearlyFull"} | (ARCHIVE_ALERTS if archive_on else set())
    job = f'job="{FULLNAME}-metrics"'
    archive = {**ARCHIVE_ALERT_DEFAULTS, **options.get("archive", {})}
    archive_for = {"BinlogRelayArchiveLagging": archive["lagFor"],
                   "BinlogRelayArchiveStoreDown": archive["storeDownFor"],
                   "BinlogRelayArchiveClockSkew": archive["clockSkewFor"]}
    for name, rule in rules.items():
        if name == "BinlogRelayArchiveDamagedReads":  # fires at once: the window is in the expression
            assert set(rule) == {"alert", "expr", "labels", "annotations"}, name
        else:
            assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, name
            assert rule["for"] == archive_for.get(name, options.get("for", "5m")), name
        assert rule["labels"]["severity"] == "warning"
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        expr = rule["expr"]
        assert expr.count("{") == expr.count("}") and expr.count("(") == expr.count(")"), name
        assert f'namespace="{NAMESPACE}"' in expr
    assert rules["BinlogRelayDown"]["expr"] == f'up{{namespace="{NAMESPACE}", {job}}} == 0'
    assert rules["BinlogRelayUpstreamDown"]["expr"] == (
        f'binlog_relay_upstream_connected{{namespace="{NAMESPACE}", {job}}} == 0')
    assert rules["BinlogRelayLagHigh"]["expr"] == (
        f'binlog_relay_upstream_lag_seconds{{namespace="{NAMESPACE}", {job}}} '
        f'> {options.get("lagThresholdSeconds", 300)}')
    disk = " ".join(rules["BinlogRelayDiskNearlyFull"]["expr"].split())
    match = re.fullmatch(
        r"kubelet_volume_stats_available_bytes\{(.+?)\} / "
        r"kubelet_volume_stats_capacity_bytes\{(.+?)\} < ([0-9.]+)", disk)
    assert match and match.group(1) == match.group(2), disk
    assert float(match.group(3)) == options.get("diskFreeRatio", 0.10)
    # The regex names exactly the PVCs of the StatefulSet's pods: <claim>-<statefulset>-<ordinal>.
    pvc_regex = re.search(r'persistentvolumeclaim=~"([^"]+)"', match.group(1)).group(1)
    claim = rendered.statefulset["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
    for ordinal in range(rendered.statefulset["spec"]["replicas"]):
        assert re.fullmatch(pvc_regex, f"{claim}-{FULLNAME}-{ordinal}")
    assert not re.fullmatch(pvc_regex, f"{claim}-{FULLNAME}-other-0")
    # Alertmanager templates survive Helm's own templating.
    assert "{{ $labels.pod }}" in rules["BinlogRelayUpstreamDown"]["annotations"]["summary"]
    if archive_on:
        assert rules["BinlogRelayArchiveLagging"]["expr"] == (
            f'binlog_relay_archive_lag_files{{namespace="{NAMESPACE}", {job}}} > {archive["lagFiles"]}')
        assert rules["BinlogRelayArchiveStoreDown"]["expr"] == (
            f'binlog_relay_archive_store_up{{namespace="{NAMESPACE}", {job}}} == 0')
        assert rules["BinlogRelayArchiveDamagedReads"]["expr"] == (
            f'increase(binlog_relay_archive_damaged_reads_total{{namespace="{NAMESPACE}", {job}}}'
            f'[{archive["damagedReadsWindow"]}]) > 0')
        assert rules["BinlogRelayArchiveClockSkew"]["expr"] == (
            f'abs(binlog_relay_archive_store_clock_offset_seconds{{namespace="{NAMESPACE}", {job}}}) '
            f'> {archive["clockSkewSeconds"]}')
        assert "{{ $labels.pod }}" in rules["BinlogRelayArchiveStoreDown"]["annotations"]["summary"]


ARCHIVE_ALERTS = {"BinlogRelayArchiveLagging", "BinlogRelayArchiveStoreDown", "BinlogRelayArchiveDamagedReads",
                  "BinlogRelayArchiveClockSkew"}
ARCHIVE_ALERT_DEFAULTS = {"lagFiles": 10, "lagFor": "15m", "storeDownFor": "10m", "damagedReadsWindow": "15m",
                          "clockSkewSeconds": 300, "clockSkewFor": "10m"}


def rule_groups(rendered: Rendered) -> list[dict[str, Any]]:
    """The PrometheusRule's groups: what Prometheus loads from a rule file."""
    (doc,) = rendered.all("PrometheusRule")
    groups: list[dict[str, Any]] = doc["spec"]["groups"]
    return groups


def test_prometheus_rule_passes_promtool(rendered: Rendered, tmp_path: Path) -> None:
    """Every rule (expression, duration, annotation templates) as Prometheus would load it."""
    if not rendered.values.get("prometheusRule", {}).get("enabled"):
        return
    from tests.support.metrics import promtool_path

    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": rule_groups(rendered)}))
    checked = run([promtool_path(), "check", "rules", str(rules_file)])
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_archive_alerts_fire_as_documented(helm: str, tmp_path: Path,
                                           tmp_path_factory: pytest.TempPathFactory) -> None:
    """`promtool test rules` on the archive's alerts: lag past lagFiles for lagFor, the store down
    for storeDownFor, any damaged read within damagedReadsWindow (at once, and over after it), and
    the host's clock off the store's, ahead or behind, past clockSkewSeconds for clockSkewFor."""
    from tests.support.metrics import promtool_path

    values = VALUE_SETS["archive"]
    result = helm_template(helm, values_file(tmp_path_factory, values))
    assert result.returncode == 0, result.stderr
    groups = rule_groups(Rendered("archive", values, result.stdout))
    for group in groups:  # promtool compares annotations too: the templates are checked above
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    bound = values["prometheusRule"]["archive"]["lagFiles"]
    assert bound > ARCHIVE_ALERT_DEFAULTS["lagFiles"]

    def series(name: str, pod: int) -> str:
        return f'{name}{{namespace="{NAMESPACE}", job="{FULLNAME}-metrics", pod="{FULLNAME}-{pod}"}}'

    def firing(pod: int) -> list[dict[str, Any]]:
        return [{"exp_labels": {"severity": "warning", "namespace": NAMESPACE, "job": f"{FULLNAME}-metrics",
                                "pod": f"{FULLNAME}-{pod}"}}]

    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            # pod 0: past the bound from minute 1; pod 1: above the default bound, below the chart's value
            {"series": series("binlog_relay_archive_lag_files", 0), "values": f"0 {bound + 5}x30"},
            {"series": series("binlog_relay_archive_lag_files", 1), "values": f"{bound - 5}x30"},
            # pod 0: the store down from minute 1 (storeDownFor: 5m); pod 1: up
            {"series": series("binlog_relay_archive_store_up", 0), "values": "1 0x20"},
            {"series": series("binlog_relay_archive_store_up", 1), "values": "1x20"},
            # pod 1: one damaged read at minute 6
            {"series": series("binlog_relay_archive_damaged_reads_total", 0), "values": "0x40"},
            {"series": series("binlog_relay_archive_damaged_reads_total", 1), "values": "0x5 1x35"},
            # pod 0: its clock 20 minutes ahead from minute 1; pod 1: 4 minutes behind from minute 1, 6
            # from minute 6; pod 2: a second off
            {"series": series("binlog_relay_archive_store_clock_offset_seconds", 0), "values": "0 -1200x30"},
            {"series": series("binlog_relay_archive_store_clock_offset_seconds", 1), "values": "0 240x4 360x30"},
            {"series": series("binlog_relay_archive_store_clock_offset_seconds", 2), "values": "1x30"},
        ],
        "alert_rule_test": [
            {"eval_time": "10m", "alertname": "BinlogRelayArchiveLagging", "exp_alerts": []},
            {"eval_time": "17m", "alertname": "BinlogRelayArchiveLagging", "exp_alerts": firing(0)},
            {"eval_time": "4m", "alertname": "BinlogRelayArchiveStoreDown", "exp_alerts": []},
            {"eval_time": "7m", "alertname": "BinlogRelayArchiveStoreDown", "exp_alerts": firing(0)},
            {"eval_time": "5m", "alertname": "BinlogRelayArchiveDamagedReads", "exp_alerts": []},
            {"eval_time": "6m", "alertname": "BinlogRelayArchiveDamagedReads", "exp_alerts": firing(1)},
            {"eval_time": "20m", "alertname": "BinlogRelayArchiveDamagedReads", "exp_alerts": firing(1)},
            {"eval_time": "22m", "alertname": "BinlogRelayArchiveDamagedReads", "exp_alerts": []},
            {"eval_time": "10m", "alertname": "BinlogRelayArchiveClockSkew", "exp_alerts": []},
            {"eval_time": "15m", "alertname": "BinlogRelayArchiveClockSkew", "exp_alerts": firing(0)},
            {"eval_time": "16m", "alertname": "BinlogRelayArchiveClockSkew", "exp_alerts": firing(0) + firing(1)},
        ],
    }]}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    checked = run([promtool_path(), "test", "rules", str(tmp_path / "tests.yaml")], cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


# ------------------------------------------------------------------ what the pod really reads


SECRET_DIR = "/etc/binlog-relay/secret"  # where both containers mount the credentials Secret
ARCHIVE_DIR = "/etc/binlog-relay/archive"  # where both containers mount the archive's Secrets
CONFIG_DIR = "/etc/binlog-relay/config"  # where the init container mounts the ConfigMap


def expected_password(secret: dict[str, str], user: dict[str, Any]) -> str | None:
    """A users.yaml entry's password: given, or in the Secret's key its password_file names."""
    if "password_file" in user:
        directory, key = user["password_file"].rsplit("/", 1)
        assert directory == SECRET_DIR, user["password_file"]
        return secret[key]
    return user.get("password")


def resolve_env(rendered: Rendered, container: dict[str, Any], pod_name: str) -> dict[str, str]:
    """The container's environment as the kubelet would set it."""
    secrets = rendered.secrets()
    env = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
            continue
        source = var["valueFrom"]
        if "fieldRef" in source:
            assert source["fieldRef"]["fieldPath"] == "metadata.name"
            env[var["name"]] = pod_name
        else:
            ref = source["secretKeyRef"]
            assert not ref.get("optional"), "a missing credential must keep the pod from starting"
            env[var["name"]] = secrets[ref["name"]][ref["key"]]
    return env


def mount_volumes(rendered: Rendered, container: dict[str, Any], root: Path,
                  pod_spec: dict[str, Any] | None = None) -> dict[str, Path]:
    """Fill a directory per volumeMount of ``container`` (of the relay's pods, or of ``pod_spec``)
    like the kubelet; mountPath -> directory."""
    volumes = {volume["name"]: volume for volume in (pod_spec or rendered.pod_spec)["volumes"]}
    configmaps = {cm["metadata"]["name"]: cm["data"] for cm in rendered.all("ConfigMap")}
    secrets = rendered.secrets()
    mounts = {}
    for mount in container["volumeMounts"]:
        target = root / mount["name"]
        target.mkdir(parents=True, exist_ok=True)
        mounts[mount["mountPath"]] = target
        if mount["name"] == "data":
            continue
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            data, items, optional = configmaps[volume["configMap"]["name"]], volume["configMap"].get("items"), False
        elif "projected" in volume:  # the archive's Secrets
            for path, content in rendered.archive_files().items():
                (target / path).write_text(content)
            continue
        elif "secret" in volume:
            name = volume["secret"]["secretName"]
            # TLS Secrets are the user's; stand-ins with the keys the chart asks for.
            data = secrets.get(name) or {item["key"]: f"PEM of {name}/{item['key']}\n"
                                         for item in volume["secret"].get("items", [])}
            items, optional = volume["secret"].get("items"), volume["secret"].get("optional", False)
        else:
            assert "emptyDir" in volume, volume
            continue
        for item in items or [{"key": key, "path": key} for key in data]:
            if item["key"] not in data:
                assert optional, f"volume {mount['name']}: key {item['key']} missing"
                continue
            (target / item["path"]).write_text(data[item["key"]])
    return mounts


def relay_shim(directory: Path) -> Path:
    """A `binlog-relay` on PATH that runs this checkout's CLI with this interpreter."""
    directory.mkdir(parents=True, exist_ok=True)
    shim = directory / "binlog-relay"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -c '
                    f'"import sys; from relay.cli import main; sys.exit(main())" "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return directory


def remap(text: str, mounts: dict[str, Path]) -> str:
    for mount_path in sorted(mounts, key=len, reverse=True):
        text = text.replace(mount_path, str(mounts[mount_path]))
    return text


def run_init_container(rendered: Rendered, ordinal: int, tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    """Runs the init container's script as the kubelet would; returns the assembled config."""
    init = rendered.container("config")
    assert init["image"] == rendered.container("relay")["image"]
    pod_name = f"{FULLNAME}-{ordinal}"
    mounts = mount_volumes(rendered, init, tmp_path / "volumes")
    # The users file's password_file paths lead into the Secret's mount, here a directory of the test.
    for path in mounts[SECRET_DIR].iterdir():
        path.write_text(path.read_text().replace(SECRET_DIR, str(mounts[SECRET_DIR])))
    # So do the archive's *_file paths in the ConfigMap.
    if ARCHIVE_DIR in mounts:
        config_file = mounts[CONFIG_DIR] / "config.yaml"
        config_file.write_text(config_file.read_text().replace(ARCHIVE_DIR, str(mounts[ARCHIVE_DIR])))
    shell, flag, script = init["command"]
    assert (shell, flag) == ("/bin/sh", "-c")
    env = {"PATH": f"{relay_shim(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT), **resolve_env(rendered, init, pod_name)}
    result = run([shell, flag, remap(script, mounts)], env=env, cwd=tmp_path)
    assert result.returncode == 0, f"init container of {pod_name} ({rendered.name}):\n{result.stdout}{result.stderr}"
    assert "OK" in result.stdout, result.stdout
    return mounts["/run/binlog-relay"] / "config.yaml", mounts


def pod_ordinals(rendered: Rendered) -> list[int]:
    replicas = rendered.statefulset["spec"]["replicas"]
    return sorted({0, replicas - 1})


def test_pod_config_passes_the_relays_check(rendered: Rendered, tmp_path: Path) -> None:
    values_config = rendered.values["config"]
    base = values_config.get("server_id", 1001)
    relay = rendered.container("relay")
    for ordinal in pod_ordinals(rendered):
        assembled, init_mounts = run_init_container(rendered, ordinal, tmp_path / f"pod-{ordinal}")
        env = resolve_env(rendered, relay, f"{FULLNAME}-{ordinal}")
        assert set(env) >= {"BINLOG_RELAY_UPSTREAM_PASSWORD"}
        config = load_config(assembled, environ=env)

        # server_id per pod, nothing else changed by the ordinal.
        assert config.server_id == base + ordinal
        assert config.server_id not in config.upstream.ignore_server_ids
        # data_dir is the PVC's mount.
        data_mount = next(m["mountPath"] for m in relay["volumeMounts"] if m["name"] == "data")
        assert config.data_dir == data_mount
        # The relay listens where the container ports and probes point.
        ports = {port["name"]: port["containerPort"] for port in relay["ports"]}
        assert (config.listen.port, config.metrics.port) == (ports["mysql"], ports["metrics"])
        assert config.metrics.enabled
        # Values arrive unchanged.
        upstream = values_config["upstream"]
        if upstream.get("hosts"):
            assert [(h.host, h.port) for h in config.upstream.hosts] == [
                (h["host"], h.get("port", 3306)) for h in upstream["hosts"]]
            assert config.upstream.host is None
        else:
            assert config.upstream.host == upstream["host"]
        assert config.upstream.port == upstream.get("port", 3306)
        assert list(config.upstream.ignore_server_ids) == upstream.get("ignore_server_ids", [])
        assert config.upstream.ssl.mode == upstream.get("ssl", {}).get("mode", "disabled")
        if "start" in upstream:
            assert (config.upstream.start.file, config.upstream.start.position) == (
                upstream["start"]["file"], upstream["start"]["position"])
        # Credentials come from the Secret.
        secrets = rendered.secrets()
        secret = secrets[rendered.values.get("auth", {}).get("existingSecret") or FULLNAME]
        assert config.upstream.password.reveal() == secret["upstream-password"]
        expected_users = yaml.safe_load(secret["users.yaml"])["users"]
        assert [user.name for user in config.users] == [user["name"] for user in expected_users]
        for user, expected in zip(config.users, expected_users):
            if "password_file" in expected:  # a file the relay container reads at start
                assert SECRET_DIR in {m["mountPath"] for m in relay["volumeMounts"]}
            if expected_password(secret, expected) is not None:
                assert user.password.reveal() == expected_password(secret, expected)
            else:
                assert user.password_hash == expected["password_hash"]
        # TLS files are where the relay container mounts them.
        relay_mounts = {m["mountPath"] for m in relay["volumeMounts"]}
        for path in filter(None, [config.listen.ssl.cert, config.listen.ssl.key, config.upstream.ssl.ca,
                                  config.upstream.ssl.cert, config.upstream.ssl.key]):
            assert os.path.dirname(path) in relay_mounts, path
            assert remap(path, init_mounts) != path and Path(remap(path, init_mounts)).is_file(), path
        tls = rendered.values.get("tls", {})
        assert (config.listen.ssl.cert is not None) == bool(tls.get("listen", {}).get("secretName"))
        assert (config.upstream.ssl.ca is not None) == bool(tls.get("upstream", {}).get("secretName"))
        # extraEnv overrides reach the relay.
        for var in rendered.values.get("extraEnv", []):
            assert env[var["name"]] == var["value"]
        check_archive(rendered, config, init_mounts)


def check_archive(rendered: Rendered, config: Any, init_mounts: dict[str, Path]) -> None:
    """The archive's settings arrive unchanged, and its files hold what the user's Secrets hold,
    mounted in the relay container too, and the relay takes them (credentials and keys)."""
    from relay.app import archive_settings

    values = rendered.values["config"].get("archive", {})
    archive = config.archive
    assert (archive.url, archive.endpoint_url, archive.region) == (
        values.get("url"), values.get("endpoint_url"), values.get("region"))
    assert archive.compression_level == values.get("compression_level", DEFAULT_LEVEL)
    retention = values.get("retention", {})
    assert archive.retention.max_age == (90 * 86400 if retention.get("max_age") else None)
    assert archive.retention.max_files == retention.get("max_files")
    secrets = rendered.secrets()
    options = rendered.values.get("archive", {})
    if not options:
        assert archive.access_key_id_file is archive.secret_access_key_file is archive.encryption_key_file is None
        assert archive.old_encryption_key_files == ()
        assert ARCHIVE_DIR not in init_mounts
        return
    relay_mounts = {m["mountPath"]: m["name"] for m in rendered.container("relay")["volumeMounts"]}
    assert relay_mounts[ARCHIVE_DIR] == "archive-secrets"
    credentials, current = options["credentialsSecret"], options["encryptionKeySecret"]
    expected = [
        (archive.access_key_id_file, secrets[credentials["name"]][credentials["accessKeyIdKey"]]),
        (archive.secret_access_key_file, secrets[credentials["name"]][credentials["secretAccessKeyKey"]]),
        (archive.encryption_key_file, secrets[current["name"]][current["key"]]),
    ]
    assert len(archive.old_encryption_key_files) == len(options["oldEncryptionKeySecrets"])
    for path, old in zip(archive.old_encryption_key_files, options["oldEncryptionKeySecrets"]):
        expected.append((path, secrets[old["name"]][old["key"]]))
    for path, content in expected:
        assert path is not None and Path(path).parent == init_mounts[ARCHIVE_DIR], path
        assert Path(path).read_text() == content, path
    settings = archive_settings(config)
    assert settings is not None and len(settings.keks) == 1 + len(options["oldEncryptionKeySecrets"])
    assert settings.store.access_key_id_file == Path(archive.access_key_id_file)


def test_rendered_config_parses_in_process(rendered: Rendered, tmp_path: Path) -> None:
    """The same without the shell: ConfigMap + users + the pod's overrides through parse_config."""
    archive_dir = tmp_path / "archive"  # the archive's Secrets as mounted
    archive_dir.mkdir()
    for name, content in rendered.archive_files().items():
        (archive_dir / name).write_text(content)
    configmap = yaml.safe_load(rendered.one("ConfigMap", FULLNAME)["data"]["config.yaml"]
                               .replace(ARCHIVE_DIR, str(archive_dir)))
    secret = rendered.secrets()[rendered.auth_secret]
    for key, value in secret.items():  # the Secret as mounted, for the users' password_file
        (tmp_path / key).write_text(value)
    secret = {**secret, "users.yaml": secret["users.yaml"].replace(SECRET_DIR, str(tmp_path))}
    base = int(next(v["value"] for v in rendered.container("config")["env"] if v["name"] == "SERVER_ID_BASE"))
    assert base == rendered.values["config"].get("server_id", 1001)
    data = {"server_id": base + rendered.statefulset["spec"]["replicas"] - 1, **configmap,
            **yaml.safe_load(secret["users.yaml"])}
    env = resolve_env(rendered, rendered.container("relay"), f"{FULLNAME}-0")
    config = parse_config(data, environ=env, source="chart")
    retention = rendered.values["config"].get("storage", {}).get("retention", {})
    if "max_size" in retention:
        assert config.storage.retention.max_size == 80 * 2**30
        assert config.storage.retention.max_age == 14 * 86400
        assert config.storage.retention.min_files == retention["min_files"]
    else:
        assert config.storage.retention.max_size is None
    assert config.storage.retention.replica_grace == (7200 if "replica_grace" in retention else 3600)
    assert config.upstream.semi_sync == rendered.values["config"]["upstream"].get("semi_sync", False)
    check_archive(rendered, config, {ARCHIVE_DIR: archive_dir} if rendered.archive_files() else {})


# ------------------------------------------------------------------ the archive check's CronJob


def verify_job_pod(rendered: Rendered) -> dict[str, Any]:
    return rendered.one("CronJob", f"{FULLNAME}-archive-verify")["spec"]["jobTemplate"]["spec"]["template"]


def test_archive_verify_cronjob(rendered: Rendered) -> None:
    """The check's Job: not retried (its failure is the signal), one at a time, its pods counted
    as relays by no Service or PodDisruptionBudget, the archive's Secrets and the relay's
    configuration mounted as the relay mounts them, its scratch copies on a volume of the size
    asked for."""
    verify = rendered.values.get("archive", {}).get("verify", {})
    if not verify.get("schedule"):
        assert not rendered.all("CronJob")
        return
    cronjob = rendered.one("CronJob", f"{FULLNAME}-archive-verify")["spec"]
    assert cronjob["schedule"] == verify["schedule"] and cronjob["concurrencyPolicy"] == "Forbid"
    assert cronjob["jobTemplate"]["spec"]["backoffLimit"] == 0
    pod = verify_job_pod(rendered)
    labels = pod["metadata"]["labels"]
    for doc in rendered.all("Service") + rendered.all("PodDisruptionBudget"):
        selector = doc["spec"]["selector"]
        selector = selector.get("matchLabels", selector)
        assert not selector.items() <= labels.items(), f"{doc['kind']} {doc['metadata']['name']} selects the check"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    (container,) = spec["containers"]
    relay = rendered.container("relay")
    assert container["image"] == relay["image"] and container["securityContext"] == relay["securityContext"]
    assert container["resources"] == verify.get("resources", {})
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    relay_volumes = {volume["name"]: volume for volume in rendered.pod_spec["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    for name in mounts.values():
        if name in relay_volumes:
            assert volumes[name] == relay_volumes[name], name
    assert mounts[ARCHIVE_DIR] == "archive-secrets"
    env = {var["name"]: var.get("value") for var in container["env"]}
    assert mounts[env["TMPDIR"]] == "scratch"
    assert volumes["scratch"]["emptyDir"]["sizeLimit"] == verify["scratchSize"]


def test_the_archive_verify_job_checks_the_archive(helm: str, s3_server: Any, tmp_path: Path,
                                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    """The Job's script run as the kubelet would (its volumes filled from the rendered ConfigMap
    and the user's Secrets, its environment resolved), with the real CLI, against a real S3 API
    (moto): an empty archive passes, an archive holding a damaged file fails the Job, naming it."""
    values = copy.deepcopy(VALUE_SETS["archive"])
    values["config"]["archive"].update(url=f"s3://{s3_server.bucket}/relay", endpoint_url=s3_server.endpoint)
    result = helm_template(helm, values_file(tmp_path_factory, values))
    assert result.returncode == 0, result.stderr
    rendered = Rendered("archive-on-moto", values, result.stdout)
    pod = verify_job_pod(rendered)
    (container,) = pod["spec"]["containers"]
    mounts = mount_volumes(rendered, container, tmp_path / "volumes", pod["spec"])
    config_file = mounts[CONFIG_DIR] / "config.yaml"
    config_file.write_text(config_file.read_text().replace(ARCHIVE_DIR, str(mounts[ARCHIVE_DIR])))
    shell, flag, script = container["command"]
    env = {"PATH": f"{relay_shim(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
           **{name: remap(value, mounts) for name, value in resolve_env(rendered, container, "verify-x1").items()}}

    def run_job() -> subprocess.CompletedProcess[str]:
        return run([shell, flag, remap(script, mounts)], env=env, cwd=tmp_path)

    empty = run_job()
    assert empty.returncode == 0 and "verified 0 file(s)" in empty.stdout, empty.stdout + empty.stderr
    s3_server.client().put_object(Bucket=s3_server.bucket, Key="relay/binlogs/mysql-bin.000001.meta.json",
                                  Body=b"not a meta document")
    damaged = run_job()
    assert damaged.returncode == 1, damaged.stdout + damaged.stderr
    assert "1 damaged" in damaged.stdout and "mysql-bin.000001: " in damaged.stdout, damaged.stdout


# ------------------------------------------------------------------ values.schema.json vs the relay


def schema_paths(node: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    for key, child in node.get("properties", {}).items():
        path = f"{prefix}.{key}" if prefix else key
        yield path, child
        yield from schema_paths(child, path)
        if child.get("type") == "array" and isinstance(child.get("items"), dict):
            yield from schema_paths(child["items"], path + "[]")  # a list of sections: users[].name


def test_values_schema_knows_every_relay_key() -> None:
    """values.schema.json's `config` has exactly the relay's keys minus the chart-managed ones."""
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["config"]
    in_schema = dict(schema_paths(schema))
    relay_keys = {option.path: option for option in iter_options()
                  if option.path.split("[")[0] not in CHART_MANAGED and not option.path.startswith("users")}
    assert set(in_schema) == set(relay_keys), (
        f"add to values.schema.json: {sorted(set(relay_keys) - set(in_schema))}; "
        f"remove from it: {sorted(set(in_schema) - set(relay_keys))}")
    for path, node in in_schema.items():
        option = relay_keys[path]
        if option.type == "mapping":
            assert node.get("additionalProperties") is False, path
        if option.type.startswith("one of "):
            choices = option.type.removeprefix("one of ").split(", ")
            assert set(choices) <= set(node["enum"]) and set(node["enum"]) - set(choices) <= {
                choice.lower() for choice in choices}, path
    # The chart's defaults (values.yaml) are a valid relay configuration once host is set.
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["config"]
    defaults["upstream"]["host"] = "primary"
    parse_config({**defaults, "data_dir": "/var/lib/binlog-relay"}, environ={})


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize(("values", "message"), [
    ({}, "config.upstream.host is required"),
    ({"config": {"data_dir": "/elsewhere"}}, "data_dir"),
    ({"config": {"users": []}}, "users"),
    ({"config": {"upstream": {"password": "x"}}}, "password"),
    ({"config": {"upstream": {"hots": "typo"}}}, "hots"),
    ({"config": {"storage": {"sync": "sometimes"}}}, "sync"),
    ({"replicaCount": 3, "config": {"server_id": 10, "upstream": {"ignore_server_ids": [12]}}},
     "ignore_server_ids contains 12"),
    ({"replicaCount": 2, "config": {"server_id": 4294967295}}, "exceeds 4294967295"),
    ({"auth": {"users": [{"name": "a"}]}}, "users"),
    ({"auth": {"users": [{"name": "a", "password": "p", "password_hash": "*" + "0" * 40}]}}, "users"),
    ({"auth": {"existingSecret": "s", "upstreamPassword": "p"}}, "not used with auth.existingSecret"),
    ({"config": {"listen": {"ssl": {"require": True}}}}, "tls.listen.secretName"),
    ({"config": {"upstream": {"ssl": {"mode": "verify_ca"}}}}, "tls.upstream.secretName"),
    ({"config": {"metrics": {"enabled": False}}}, "metrics.enabled must stay true"),
    ({"config": {"listen": {"port": 0}}}, "listen.port must not be 0"),
    ({"config": {"upstream": {"hosts": [{"host": "db-1"}]}}}, "give host (one primary) or hosts"),
    ({"config": {"archive": {"url": "https://bucket/prefix"}}}, "/config/archive/url"),
    ({"config": {"archive": {"url": "s3://"}}}, "/config/archive/url"),
    ({"config": {"archive": {"endpoint_url": "minio:9000"}}}, "/config/archive/endpoint_url"),
    ({"config": {"archive": {"compression_level": 0}}}, "/config/archive/compression_level"),
    ({"config": {"archive": {"compression_level": 20}}}, "/config/archive/compression_level"),
    ({"config": {"archive": {"retention": {"max_files": 0}}}}, "/config/archive/retention/max_files"),
    ({"config": {"archive": {"retention": {"max_age": "soon"}}}}, "/config/archive/retention/max_age"),
    ({"config": {"archive": {"url": "s3://b", "access_key_id_file": "/k"}}}, "access_key_id_file"),
    ({"config": {"archive": {"url": "s3://b", "old_encryption_key_files": ["/k"]}}}, "old_encryption_key_files"),
    ({"config": {"archive": {"writer_lease": 3}}}, "/config/archive/writer_lease"),
    ({"config": {"archive": {"writer_lease": "a minute"}}}, "/config/archive/writer_lease"),
    ({"archive": {"credentialsSecret": {"name": "s3"}}}, "set config.archive.url"),
    ({"archive": {"encryptionKeySecret": {"name": "keys"}}}, "set config.archive.url"),
    ({"config": {"archive": {"url": "s3://b"}}, "archive": {"oldEncryptionKeySecrets": [{"name": "k"}]}},
     "/archive/oldEncryptionKeySecrets/0"),
    ({"config": {"archive": {"url": "s3://b"}}, "archive": {"oldEncryptionKeySecrets": [{"name": "k", "key": "k"}]}},
     "set archive.encryptionKeySecret"),
    ({"config": {"archive": {"url": "s3://b"}}, "archive": {"credentialsSecret": {"name": "s3", "accessKeyIdKey": ""}}},
     "/archive/credentialsSecret/accessKeyIdKey"),
    ({"archive": {"verify": {"schedule": "0 3 * * *"}}}, "archive.verify.schedule checks the archive"),
    ({"prometheusRule": {"archive": {"lagFiles": 0}}}, "/prometheusRule/archive/lagFiles"),
    ({"prometheusRule": {"archive": {"storeDownFor": "ten minutes"}}}, "/prometheusRule/archive/storeDownFor"),
    ({"prometheusRule": {"archive": {"clockSkewSeconds": 0}}}, "/prometheusRule/archive/clockSkewSeconds"),
])
def test_chart_refuses(helm: str, tmp_path_factory: pytest.TempPathFactory, values: dict[str, Any],
                       message: str) -> None:
    values = copy.deepcopy(values)
    if values != {}:
        values.setdefault("config", {}).setdefault("upstream", {}).setdefault("host", "primary")
    result = helm_template(helm, values_file(tmp_path_factory, values))
    assert result.returncode != 0, f"rendered although {message!r} is wrong"
    assert message in result.stderr, result.stderr


# ------------------------------------------------------------------ the relay's metric names


def test_alerted_metrics_exist_in_the_relay(helm: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every relay metric the PrometheusRule names (the archive's alerts included) is one the relay
    exports (relay.metrics.metrics_reference(), the README's table)."""
    from relay.metrics import metrics_reference

    exported = set(re.findall(r"`(binlog_relay_[a-z0-9_]+)`", metrics_reference()))
    values = VALUE_SETS["archive"]
    result = helm_template(helm, values_file(tmp_path_factory, values))
    assert result.returncode == 0, result.stderr
    named = set()
    for group in rule_groups(Rendered("archive", values, result.stdout)):
        for rule in group["rules"]:
            named.update(re.findall(r"\b(binlog_relay_[a-z0-9_]+)\b", rule["expr"]))
    assert {"binlog_relay_upstream_connected", "binlog_relay_upstream_lag_seconds", "binlog_relay_archive_lag_files",
            "binlog_relay_archive_store_up", "binlog_relay_archive_damaged_reads_total"} <= named
    missing = named - exported
    assert not missing, f"the PrometheusRule alerts on metrics the relay does not export: {sorted(missing)}"
