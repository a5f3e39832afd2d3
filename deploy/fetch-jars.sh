#!/usr/bin/env bash
# Fetches the JVM parts HiFi runs (deploy/jvm/<set>/pom.xml, versions pinned) with Maven into
# DEST/<set> (default .venv/jars): Apache Kafka's broker and tools (kafka), Spark's Kafka
# connector (spark); `fetch-jars.sh DEST SET...` fetches only those sets. Maven checks each
# file's checksum against the registry's (-C: a mismatch fails) and keeps its own cache in
# ~/.m2; a set already in place (its pom unchanged) is not fetched again. HIFI_MAVEN_ARGS adds
# Maven options (a settings file with a mirror: -s FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
dest="$(realpath -m "${1:-.venv/jars}")"
shift || true
poms=()
if [ "$#" -gt 0 ]; then
  for set_name in "$@"; do poms+=("deploy/jvm/$set_name/pom.xml"); done
else
  poms=(deploy/jvm/*/pom.xml)
fi
for pom in "${poms[@]}"; do
  if [ ! -f "$pom" ]; then
    echo "no such set of JVM parts: $pom" >&2
    exit 1
  fi
  set_name="$(basename "$(dirname "$pom")")"
  out="$dest/$set_name"
  stamp="$out/.pom.sha256"
  want="$(sha256sum "$pom" | cut -d' ' -f1)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    continue
  fi
  if ! command -v mvn >/dev/null 2>&1; then
    echo "HiFi fetches its JVM parts with Maven: install it (Debian: apt-get install maven)" >&2
    exit 1
  fi
  echo "fetching the $set_name jars with Maven ($pom)" >&2
  rm -rf "$out.tmp"
  log="$(mktemp)"
  # shellcheck disable=SC2086
  if ! mvn -B -q -C ${HIFI_MAVEN_ARGS:-} -f "$pom" \
       org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies -DincludeScope=runtime \
       -DoutputDirectory="$out.tmp" >"$log" 2>&1; then
    # Maven's first error, without its colour codes and long tail: what it could not resolve and why
    reason="$(sed -e 's/\x1b\[[0-9;]*m//g' "$log" | grep -m1 '^\[ERROR\] ' | sed -e 's/^\[ERROR\] //' | cut -c1-300)"
    echo "could not fetch the $set_name jars: ${reason:-Maven failed} (Maven's output: $log)" >&2
    exit 1
  fi
  rm -f "$log"
  rm -rf "$out"
  mv "$out.tmp" "$out"
  echo "$want" > "$stamp"
done
