#!/usr/bin/env bash
# Installs every build and test dependency of llmk from Debian 12 packages.
# Idempotent and non-interactive; skips apt when everything is present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache git
  libcaf-dev libzmq3-dev cppzmq-dev libsentencepiece-dev catch2 libboost-dev
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libspdlog-dev libcpp-httplib-dev
  libopenblas-dev libdnnl-dev libconcurrentqueue-dev
  python3 python3-zmq python3-numpy curl prometheus chromium
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
