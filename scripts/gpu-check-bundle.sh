# shellcheck shell=bash
# scripts/gpu-check-bundle.sh: sourced by scripts/gpu-check.sh. Packing the
# checks' programs, plugins, libraries and model into one archive on a
# development machine (--bundle), and unpacking it on a GPU machine that has
# none of llmk's dependencies (--prebuilt). Uses gpu-check.sh's variables
# (build_dir, bundle_plugins, amx_bins, prebuilt, out_dir, ...) and its
# functions die and configure_and_build.

# ---------------------------------------------------------------- --bundle
# Libraries never packed: glibc's (the target's own must be used) and the
# CUDA libraries (the GPU machine has them; cuBLASLt alone is 540 MB).
skip_lib() {
  case "$(basename "$1")" in
    ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libresolv.so*|libutil.so*|linux-vdso*) return 0 ;;
    libcuda.so*|libcublas.so*|libcublasLt.so*|libnvidia*|libnccl.so*) return 0 ;;
  esac
  return 1
}

make_bundle() {
  configure_and_build
  local stage
  stage=$(mktemp -d)
  local root="$stage/llmk-gpu-check"
  mkdir -p "$root/bin" "$root/plugins" "$root/lib" "$root/shared/models" "$root/shared/golden" "$root/scripts"
  cp "$build_dir/bin/llmk" "$build_dir/tests/test_cuda_native" "$build_dir/bin/bench_gpu" "$root/bin/" ||
    die "binaries missing in $build_dir"
  cp "$repo_root/bench/cuda/torch_baseline.py" "$root/bin/"
  cp "$build_dir/tests/test_kernels_avx512bf16" "$build_dir/bin/bench_forward_cpu" "$root/bin/" ||
    die "the AMX phase's programs are missing in $build_dir"
  local p
  for p in "${bundle_plugins[@]}"; do cp "$build_dir/plugins/libllmk_$p.so" "$root/plugins/" || die "plugin $p missing"; done
  strip --strip-unneeded "$root"/bin/llmk "$root"/bin/test_cuda_native "$root"/bin/bench_gpu "$root"/plugins/*.so \
    "${amx_bins[@]/#/$root/bin/}"
  local lib
  # ldd lists the whole closure of each file (dependencies of dependencies too).
  for lib in $(ldd "$root"/bin/llmk "$root"/bin/test_cuda_native "$root"/bin/bench_gpu "$root"/plugins/*.so \
      "${amx_bins[@]/#/$root/bin/}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
    skip_lib "$lib" && continue
    cp -L "$lib" "$root/lib/$(basename "$lib")"
  done
  local shared="$repo_root/../shared"
  cp -r "$shared/models/stories260K" "$root/shared/models/" || die "$shared/models/stories260K missing"
  cp "$shared/golden/stories260K.json" "$root/shared/golden/" || die "$shared/golden/stories260K.json missing"
  # bench_gpu's dummy presets load the Llama 2 tokenizer (0.5 MB).
  mkdir -p "$root/shared/models/llama2-tokenizer"
  cp "$shared/models/llama2-tokenizer/tokenizer.model" "$root/shared/models/llama2-tokenizer/" ||
    die "$shared/models/llama2-tokenizer/tokenizer.model missing"
  pack_openmpi "$root"
  cp "$repo_root/scripts/gpu-check.sh" "$repo_root/scripts/gpu-check-parallel.sh" "$repo_root/scripts/gpu-check-bundle.sh" \
    "$root/scripts/"
  {
    echo "llmk gpu-check bundle"
    echo "source: $(git -C "$repo_root" describe --always --dirty 2>/dev/null || echo unknown)"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm)"
    echo "nvcc: $( (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version) | tail -1)"
    # The fatbins name their targets as text (no cuobjdump needed).
    echo "cuda architectures: $(grep -aoE -- '-arch sm_[0-9]+a?' "$root/bin/test_cuda_native" | sort -u | cut -c7- | tr '\n' ' ')"
    echo "libraries carried: $(ls "$root/lib" | tr '\n' ' ')"
  } > "$root/MANIFEST"
  mkdir -p "$(dirname "$bundle_file")"
  echo "gpu-check: packing $bundle_file (xz)" >&2
  tar -C "$stage" -cf - llmk-gpu-check | xz -6 -T0 > "$bundle_file" || die "packing failed"
  rm -rf "$stage"
  local bytes
  bytes=$(stat -c %s "$bundle_file")
  echo "gpu-check: wrote $bundle_file ($((bytes / 1048576)) MiB); on the GPU machine run:"
  echo "  scripts/gpu-check.sh --prebuilt $(basename "$bundle_file")"
  [ "$bytes" -lt $((64 * 1048576)) ] || echo "gpu-check: warning: the bundle is over 64 MiB" >&2
}


# ---------------------------------------------------------------- --prebuilt
# Unpacks (or opens) a bundle and points the checks at its programs: sets
# root, llmk_bin, test_bin, bench_bin, torch_baseline, kernels_bin,
# forward_bin, plugin_dir, shared_dir, out_dir and LD_LIBRARY_PATH.
use_prebuilt() {
  if [ -f "$prebuilt" ]; then
    unpack_dir="$(cd "$(dirname "$prebuilt")" && pwd)/gpu-check-bundle"
    rm -rf "$unpack_dir" && mkdir -p "$unpack_dir"
    if ! tar -C "$unpack_dir" -xJf "$prebuilt" 2>/dev/null; then
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$prebuilt" "$unpack_dir" ||
        die "cannot unpack $prebuilt"
    fi
    root="$unpack_dir/llmk-gpu-check"
  else
    root=$(cd "$prebuilt" && pwd)
    [ -d "$root/llmk-gpu-check" ] && root="$root/llmk-gpu-check"
  fi
  [ -x "$root/bin/test_cuda_native" ] || die "$prebuilt is not a gpu-check bundle (no bin/test_cuda_native)"
  llmk_bin="$root/bin/llmk"; test_bin="$root/bin/test_cuda_native"
  bench_bin="$root/bin/bench_gpu"; torch_baseline="$root/bin/torch_baseline.py"
  kernels_bin="$root/bin/test_kernels_avx512bf16"; forward_bin="$root/bin/bench_forward_cpu"
  plugin_dir="$root/plugins"; shared_dir="$root/shared"
  [ -n "$out_dir" ] || out_dir="$root/gpu-check"
  # Carried libraries whose soname the system lacks, and the CUDA libraries
  # wherever this machine keeps them (the toolkit, or Python's nvidia wheels).
  ldconfig_bin=$(command -v ldconfig || echo /sbin/ldconfig)
  system_libs=$("$ldconfig_bin" -p 2>/dev/null)
  mkdir -p "$root/lib-missing"
  rm -f "$root"/lib-missing/*
  for lib in "$root"/lib/*; do
    [ -e "$lib" ] || continue
    grep -qF "$(basename "$lib") " <<< "$system_libs" || ln -s "$lib" "$root/lib-missing/"
  done
  cuda_dirs=""
  for name in libcublasLt.so.13 libcublas.so.13 libcudart.so.13 libnccl.so.2; do
    grep -qF "$name " <<< "$system_libs" && continue
    found=$(find /usr/local/cuda/lib64/ /usr/local/cuda/targets/ /usr/local/ /opt/ /usr/lib/ -name "$name" 2>/dev/null | head -1)
    [ -n "$found" ] && cuda_dirs="$cuda_dirs:$(dirname "$found")"
  done
  export LD_LIBRARY_PATH="$root/lib-missing${cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [ -d "$root/mpi" ] && openmpi_env "$root"  # the bundle's Open MPI, not one of the machine's
  # comm.nccl's NCCL may be absent: the parallel phase says so.
  missing=$(ldd "$llmk_bin" "$test_bin" "$bench_bin" $(ls "$plugin_dir"/*.so | grep -v comm_nccl) 2>/dev/null |
            grep "not found" | sort -u)
  if [ -n "$missing" ]; then
    echo "gpu-check: libraries still missing after LD_LIBRARY_PATH=$LD_LIBRARY_PATH:" >&2
    echo "$missing" >&2
    exit 3
  fi
}
