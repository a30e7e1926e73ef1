/* Open MPI peer for ringpipe's all-reduce figures (outside the product; see bench/mpi/run.sh).
 * nccl-tests-style: for each size, `warmup` untimed then `iters` timed MPI_Allreduce(SUM, float)
 * calls; prints one row per size with the median time over iterations (max over ranks per
 * iteration), algbw = bytes / time and busbw = algbw * 2(n-1)/n. Every row also checks the result
 * against the closed form on exactly-summable data (#wrong). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t min_bytes = argc > 1 ? strtoull(argv[1], 0, 10) : 4096;
  size_t max_bytes = argc > 2 ? strtoull(argv[2], 0, 10) : (64u << 20);
  int iters = argc > 3 ? atoi(argv[3]) : 20;
  int warmup = argc > 4 ? atoi(argv[4]) : 3;
  float* in = malloc(max_bytes);
  float* out = malloc(max_bytes);
  double* times = malloc(sizeof(double) * iters);
  if (rank == 0) printf("# np=%d\n#%12s %12s %12s %10s %10s %8s\n", n, "size", "count", "time(us)",
                        "algbw", "busbw", "#wrong");
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    size_t count = bytes / sizeof(float);
    for (size_t i = 0; i < count; i++) in[i] = (float)((i + rank) % 7);
    for (int it = 0; it < warmup + iters; it++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double dt = MPI_Wtime() - t0, dmax;
      MPI_Allreduce(&dt, &dmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (it >= warmup) times[it - warmup] = dmax;
    }
    long wrong = 0;
    for (size_t i = 0; i < count; i++) {
      double expect = 0;
      for (int r = 0; r < n; r++) expect += (double)((i + r) % 7);
      if (out[i] != (float)expect) wrong++;
    }
    long all_wrong;
    MPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    qsort(times, iters, sizeof(double), cmp_double);
    double med = times[iters / 2];
    double algbw = bytes / med / 1e9;
    if (rank == 0)
      printf(" %12zu %12zu %12.1f %10.3f %10.3f %8ld\n", bytes, count, med * 1e6, algbw,
             algbw * 2.0 * (n - 1) / n, all_wrong);
  }
  free(in); free(out); free(times);
  MPI_Finalize();
  return 0;
}
