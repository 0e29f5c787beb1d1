# scripts/gpu-check-parallel.sh: sourced by scripts/gpu-check.sh (not run on
# its own). The parallel phase and what a bundle needs for it: Open MPI
# relocated into the bundle, since the GPU machines have no Open MPI.
#
# Open MPI (Debian 12's 4.1, with PMIx 4) is found through compiled-in paths
# (/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3 for its components,
# /usr/share/openmpi for its help texts, /etc/openmpi for its defaults, and
# PMIx's own under /usr/lib/x86_64-linux-gnu/pmix2). A bundle carries them
# under mpi/ and every path is named again by the environment (OPAL_* and
# PMIX_*, which both libraries read before their compiled-in paths), with
# orterun (mpirun), orted, Open MPI's and PMIx's libraries in mpi/lib (put
# first on LD_LIBRARY_PATH), and the other libraries they load (ldd closure,
# without glibc) in the bundle's lib/ (used where the machine lacks them).
#
# NCCL is not carried (libnccl.so.2 is 200 MB): comm.nccl uses the machine's
# where it has one (the CUDA toolkit's folders, /opt, Python's nvidia
# wheels), else its check reports itself not run.
#
#   pack_openmpi ROOT       copies Open MPI into the bundle folder ROOT
#   openmpi_env ROOT        exports what makes ROOT/mpi the Open MPI in use
#   parallel_phase          the checks (gpu-check.sh's variables and record())

openmpi_system_dirs() {
  ompi_pkglibdir=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
  ompi_pkgdatadir=/usr/share/openmpi
  ompi_sysconfdir=/etc/openmpi
  pmix_dir=/usr/lib/x86_64-linux-gnu/pmix2
}

pack_openmpi() {
  local root=$1
  openmpi_system_dirs
  local orterun
  orterun=$(readlink -f "$(command -v mpirun || echo /usr/bin/mpirun)")
  [ -x "$orterun" ] && [ -x /usr/bin/orted ] && [ -d "$ompi_pkglibdir" ] ||
    die "--bundle needs Open MPI (openmpi-bin, libopenmpi-dev) for the parallel phase"
  mkdir -p "$root/mpi/bin" "$root/mpi/lib/openmpi3" "$root/mpi/lib/pmix" "$root/mpi/share" "$root/mpi/etc"
  cp "$orterun" "$root/mpi/bin/orterun"
  cp /usr/bin/orted "$root/mpi/bin/orted"
  ln -sf orterun "$root/mpi/bin/mpirun"
  cp "$ompi_pkglibdir"/*.so "$root/mpi/lib/openmpi3/"
  cp "$pmix_dir"/lib/pmix/*.so "$root/mpi/lib/pmix/"
  cp -r "$ompi_pkgdatadir" "$root/mpi/share/openmpi"
  cp -r "$pmix_dir/share/pmix" "$root/mpi/share/pmix"
  cp "$ompi_sysconfdir"/openmpi-mca-params.conf "$ompi_sysconfdir"/openmpi-default-hostfile "$root/mpi/etc/"
  local lib
  for lib in $(ldd "$root"/mpi/bin/orterun "$root"/mpi/bin/orted "$root"/mpi/lib/openmpi3/*.so "$root"/mpi/lib/pmix/*.so |
      awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
    skip_lib "$lib" && continue
    [ -e "$root/lib/$(basename "$lib")" ] || cp -L "$lib" "$root/lib/$(basename "$lib")"
  done
  # Open MPI's and PMIx's own libraries always come from the bundle (another
  # Open MPI's would not match the components): mpi/lib, first on the path.
  local own
  for own in "$root"/lib/libmpi.so* "$root"/lib/libopen-rte.so* "$root"/lib/libopen-pal.so* \
      "$root"/lib/libmca_common_*.so* "$root"/lib/libpmix.so*; do
    [ -e "$own" ] && mv "$own" "$root/mpi/lib/"
  done
  strip --strip-unneeded "$root"/mpi/bin/orterun "$root"/mpi/bin/orted 2>/dev/null || true
}

openmpi_env() {
  local mpi=$1/mpi
  export OPAL_PREFIX="$mpi" OPAL_EXEC_PREFIX="$mpi" OPAL_BINDIR="$mpi/bin" OPAL_LIBDIR="$mpi/lib"
  export OPAL_PKGLIBDIR="$mpi/lib/openmpi3" OPAL_DATAROOTDIR="$mpi/share" OPAL_DATADIR="$mpi/share"
  export OPAL_PKGDATADIR="$mpi/share/openmpi" OPAL_SYSCONFDIR="$mpi/etc"
  export PMIX_PREFIX="$mpi" PMIX_PKGLIBDIR="$mpi/lib/pmix" PMIX_PKGDATADIR="$mpi/share/pmix"
  export PATH="$mpi/bin:$PATH" LD_LIBRARY_PATH="$mpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# The phase. On one GPU:
#   - comm.nccl's conformance suite on the real NCCL, a world of one rank
#     (NCCL refuses two ranks on one device, so a single GPU holds no
#     larger NCCL world);
#   - comm.mpi's at 2 ranks on the CPU, through the mpirun in use (the
#     bundle's: a check that the relocated Open MPI works here);
#   - the golden prompts on the CUDA executor at tensor 2 over comm.mpi
#     with host copies, both ranks on the one GPU (mpirun -np 2 llmk
#     generate), compared as the golden phase compares degree 1.
parallel_phase() {
  local mpirun_bin
  mpirun_bin=$(command -v mpirun)
  if [ -z "$mpirun_bin" ]; then
    record "parallel (tensor 2 over comm.mpi, comm.nccl)" "not run" "no mpirun (a bundle from before the phase?)"
    return
  fi
  local mpirun=("$mpirun_bin" --oversubscribe --allow-run-as-root --bind-to none
                --mca btl_vader_single_copy_mechanism none)
  local t0 status
  if [ ! -f "$plugin_dir/libllmk_comm_nccl.so" ]; then
    record "comm.nccl conformance on the GPU" "not run" "no libllmk_comm_nccl.so (built without NCCL)"
  elif ldd "$plugin_dir/libllmk_comm_nccl.so" | grep -q "libnccl.*not found"; then
    record "comm.nccl conformance on the GPU" "not run" "this machine has no libnccl.so.2"
  else
    t0=$(date +%s)
    timeout 300 "$llmk_bin" plugins --conformance "$plugin_dir/libllmk_comm_nccl.so" > "$out_dir/comm-nccl.log" 2>&1
    status=$?
    if [ $status -eq 0 ]; then
      record "comm.nccl conformance on the GPU, a world of one rank" "passed" \
        "$(grep -E "passed, [0-9]+ failed" "$out_dir/comm-nccl.log" | tail -1 | sed 's/^ *//'), $(elapsed "$t0")"
    else record "comm.nccl conformance on the GPU, a world of one rank" "FAILED" "exit $status (comm-nccl.log)"; fi
  fi
  t0=$(date +%s)
  timeout 300 "${mpirun[@]}" -np 2 "$llmk_bin" plugins --conformance "$plugin_dir/libllmk_comm_mpi.so" \
    > "$out_dir/comm-mpi.log" 2>&1
  status=$?
  if [ $status -eq 0 ]; then record "comm.mpi conformance, 2 ranks ($mpirun_bin)" "passed" "$(elapsed "$t0")"
  else record "comm.mpi conformance, 2 ranks ($mpirun_bin)" "FAILED" "exit $status (comm-mpi.log)"; fi
  t0=$(date +%s)
  local n bad
  read -r n bad <<< "$(llmk_launcher=("${mpirun[@]}" -np 2)
    golden_run cuda-tp2 --set executor.device=cuda --set plugins.linear=linear.cublas \
      --set plugins.attention=attention.cuda --set parallel.tensor=2 --set parallel.comm=comm.mpi)"
  local label="golden stories260K at tensor 2 over comm.mpi, two ranks on one GPU (mpirun -np 2)"
  if [ "$bad" -eq 0 ]; then
    record "$label" "passed" "$n prompts streamed equal the golden text, a batch equals the golden ids, $(elapsed "$t0")"
  else record "$label" "FAILED" "$bad comparisons differ or runs failed, of $n prompts and one batch (golden-cuda-tp2.log)"; fi
}
