#!/usr/bin/env bash
# Measures Open MPI 4.1's MPI_Allreduce over shared memory (the peer ringpipe's all-reduce is
# compared with). Not part of the product build; installs Debian's Open MPI if missing.
#   bash bench/mpi/run.sh [min_bytes] [max_bytes] [iters]      (defaults 4096 67108864 20)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
RINGPIPE_WITH_MPI=1 bash "$here/../../scripts/setup.sh"
out=$(mktemp -d)
mpicc -O2 -o "$out/mpi_allreduce" "$here/mpi_allreduce.c"
for np in 2 4 8; do
  mpirun --allow-run-as-root --oversubscribe --mca pml ob1 --mca btl self,vader -np "$np" \
    "$out/mpi_allreduce" "${1:-4096}" "${2:-67108864}" "${3:-20}"
done
rm -rf "$out"
