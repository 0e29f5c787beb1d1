#!/bin/sh
# Compiler launcher for nvcc commands built with --ptxas-options=-v: runs the
# command, keeps ptxas's resource report (registers, stack, spills per kernel
# and architecture) in <object>.ptxas beside the object named by -o, and
# passes every other line of the compiler's stderr through.
#   nvcc_ptxas_report.sh nvcc ... -o kernel.cu.o
object=
previous=
for arg in "$@"; do
  [ "$previous" = "-o" ] && object=$arg
  previous=$arg
done
if [ -z "$object" ]; then
  exec "$@"
fi
"$@" 2> "$object.ptxas.tmp"
status=$?
grep -v -e '^ptxas info' -e '^ *[0-9]* bytes stack frame' "$object.ptxas.tmp" >&2
mv "$object.ptxas.tmp" "$object.ptxas"
exit $status
