#!/usr/bin/env bash
# The whole test suite: lint, types, tests. Installs the Debian packages the tests need
# (Prometheus for the metrics acceptance test) when it runs as root on a Debian-like machine.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v prometheus >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "== installing Debian's prometheus (metrics acceptance test)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null) \
    || echo "warning: could not install prometheus"
fi

echo "== ruff"
ruff check src tests bench
echo "== mypy (strict on src/)"
mypy
echo "== pytest"
python -m pytest "$@"
