#!/usr/bin/env bash
# Installs the Debian packages HiFi needs (redis-server, a Java 17 runtime, Maven, which fetches
# the JVM parts (deploy/fetch-jars.sh), kcat, a Kafka client the tests read HiFi's topics with,
# protobuf-compiler, whose protoc --decode they decode them with; Chromium and its
# WebDriver for the dashboard's browser test; docker-compose, which validates the compose files;
# python3-venv, without which a stock Debian's python3 makes no virtual environment) when missing.
# As root it installs them; otherwise it says what to install and fails.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if ! command -v java >/dev/null 2>&1 || ! java -version 2>&1 | grep -qE 'version "(17|21)'; then
  missing+=(openjdk-17-jre-headless)
fi
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
# a stock Debian's python3 makes no virtual environment (no ensurepip) without python3-venv
"${PYTHON:-python3}" -c "import ensurepip, venv" >/dev/null 2>&1 || missing+=(python3-venv)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "hifi setup: installing Debian packages needs root: run 'sudo make system-deps' (it installs ${missing[*]}), then 'make setup' again" >&2
  exit 1
fi
echo "installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
