#!/usr/bin/env bash
# Idempotent machine set-up for camus-xdp: Debian packages, BCC's kernel-header link and the
# project venv. Safe to run again and again: each step checks before it acts.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$here/.venv"
# One line per step here; what the tools say goes to the log (pip's warnings are hundreds of
# lines a newcomer cannot tell from trouble). A failing step ends set-up with its log's tail.
log="$here/.setup.log"
: >"$log"
step() {
  local what="$1"; shift
  echo "setup: $what"
  if ! "$@" >>"$log" 2>&1; then
    echo "setup: failed: $what (the last lines of $log follow)" >&2
    tail -n 25 "$log" >&2
    exit 1
  fi
}

# Debian packages: BCC (python3-bpfcc, never PyPI's unrelated "bcc"), clang, headers for BCC,
# xdp-tools, trafgen (netsniff-ng), tshark for MoldUDP64 decoding, venv support.
# Brokers the benchmark compares against: mosquitto, nats-server, redis-server (started by the
# benchmark on lab addresses, never as services); mosquitto-clients (mosquitto_pub/_sub) for the
# edge broker's MQTT tests; Java for PySpark; gcc for the C programs.
# PostgreSQL: the controllers' shared store (`--db postgresql://`); its tests start their own
# server as the postgres user in a temporary directory, never the Debian service.
apt_packages=(python3-bpfcc bpfcc-tools clang linux-headers-amd64 xdp-tools netsniff-ng tshark
              python3-venv iproute2 iputils-ping ethtool gcc openjdk-17-jre-headless
              mosquitto mosquitto-clients nats-server redis-server bind9-dnsutils
              postgresql)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: need root to install: ${missing[*]}" >&2; exit 1
  fi
  step "updating the Debian package lists" apt-get update -qq
  step "installing Debian packages: ${missing[*]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

# BCC finds kernel headers through /lib/modules/$(uname -r)/{build,source}. This kernel is
# custom, so point them at Debian's generic header tree (verified to work with BCC here).
mod="/lib/modules/$(uname -r)"
if [ "$(id -u)" -eq 0 ] && [ ! -e "$mod/build" ]; then
  hdr=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$hdr" ]; then
    common="${hdr%-amd64}-common"
    mkdir -p "$mod"
    ln -sfn "$hdr" "$mod/build"
    [ -d "$common" ] && ln -sfn "$common" "$mod/source"
    echo "setup: linked $mod/build -> $hdr"
  fi
fi

# The venv sees Debian's site-packages so that `import bcc` finds python3-bpfcc.
if [ ! -x "$venv/bin/python" ]; then
  step "creating the venv at $venv" /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
stamp="$venv/.camus-installed"
if [ ! -f "$stamp" ] || [ "$here/pyproject.toml" -nt "$stamp" ]; then
  step "upgrading pip" "$venv/bin/python" -m pip install -q --upgrade pip
  step "installing camus-xdp (editable) with test and benchmark dependencies (PySpark: a few minutes)" \
    "$venv/bin/python" -m pip install -q -e "$here[test,bench]"
  touch "$stamp"
fi
# P4Runtime's protobufs in today's generated form, so protobuf's compiled runtime loads them
# (scripts/p4runtime_upb.py; 10K switch entries: seconds instead of tens of seconds)
# (not fatal: without it camus-xdp picks the pure-Python runtime itself, only slower)
(cd / && "$venv/bin/python" "$here/scripts/p4runtime_upb.py" >>"$log" 2>&1) ||
  echo "setup: P4Runtime protobufs stay on protobuf's pure-Python runtime (slower switch output)" >&2

# Two P4Runtime clients written by others, each in its own venv (their protobuf pins differ from
# ours and from each other): tests/controller/test_p4rt_conformance.py drives the software
# switch with them. Not fatal here: the test says which one is missing and why.
conformance="$here/.venv-conformance"
for client in "p4runtime-shell==0.0.6" "finsy==0.30.0"; do
  name="${client%%=*}"
  dir="$conformance/$name"
  if [ ! -f "$dir/.installed-$client" ]; then
    echo "setup: installing $client into $dir (P4Runtime conformance test)"
    rm -rf "$dir"
    if /usr/bin/python3 -m venv "$dir" && "$dir/bin/python" -m pip install -q "$client" >/dev/null 2>&1; then
      touch "$dir/.installed-$client"
    else
      echo "setup: could not install $client; its conformance test will be skipped" >&2
    fi
  fi
done
