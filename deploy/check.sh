#!/usr/bin/env bash
# Static checks of deploy/ and the Dockerfile, offline. CI runs it (.ci/run); so can you:
#   apt-get install prometheus        # promtool
#   pip install -r deploy/requirements-ci.txt
#   bash deploy/check.sh
# What this cannot do here: build the image or start the compose stack (both need a Docker engine).
# The cross-checks between these files and the binary are Rust tests (tests/deploy.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "-- promtool check rules"
promtool check rules deploy/prometheus/rules/*.yml

echo "-- promtool test rules (alert unit tests, incl. cases that must not fire)"
promtool test rules deploy/prometheus/tests/*.test.yml

echo "-- promtool check config: deploy/prometheus and deploy/compose"
promtool check config deploy/prometheus/prometheus.yml
cp deploy/compose/prometheus.yml "$tmp/prometheus.yml"
cp -r deploy/prometheus/rules "$tmp/rules"
promtool check config "$tmp/prometheus.yml"

echo "-- generated files (PrometheusRule, dashboard) match their sources"
python3 deploy/generate.py --check

echo "-- PrometheusRule spec through promtool"
python3 - "$tmp/prometheusrule-spec.yml" <<'PY'
import sys, yaml
spec = yaml.safe_load(open("deploy/kubernetes/prometheusrule.yaml"))["spec"]
yaml.safe_dump({"groups": spec["groups"]}, open(sys.argv[1], "w"), sort_keys=False)
PY
promtool check rules "$tmp/prometheusrule-spec.yml"

echo "-- Kubernetes manifests against the bundled Kubernetes schemas (strict), 1.30 and 1.37"
# ServiceMonitor and PrometheusRule are CRDs without bundled schemas: kubernetes-validate warns
# and skips them; their content is checked by promtool above and by tests/deploy.rs.
for version in 1.30.0 1.37.0; do
  kubernetes-validate --strict --quiet -k "$version" deploy/kubernetes/*.yaml
done

echo "-- docker-compose.yml against the compose-spec schema"
check-jsonschema --builtin-schema vendor.compose-spec deploy/compose/docker-compose.yml
if docker compose version >/dev/null 2>&1; then
  docker compose -f deploy/compose/docker-compose.yml config --quiet
else
  echo "   (no docker compose plugin here: schema check only)"
fi

echo "-- Grafana dashboard is JSON"
python3 -m json.tool deploy/grafana/tokentap-dashboard.json >/dev/null

echo "-- Vector configs that ship the request records (deploy/vector: the reader with each sink)"
if command -v vector >/dev/null 2>&1; then
  for sink in loki clickhouse; do
    vector validate --no-environment deploy/vector/tokentap-records.yaml "deploy/vector/$sink.yaml"
  done
else
  echo "   (no vector binary here: yamllint below and tests/deploy.rs only)"
fi

echo "-- hadolint Dockerfile"
hadolint Dockerfile

echo "-- yamllint deploy/"
yamllint -f parsable -c deploy/.yamllint.yml deploy | { grep -v "line too long" || true; }
yamllint -c deploy/.yamllint.yml deploy >/dev/null

echo "deploy checks: ok"
