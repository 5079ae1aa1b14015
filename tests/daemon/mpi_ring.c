/* An MPI program for the job-group tests (tests/daemon/mpi_group_test.cc): every rank folds the
 * sum of all ranks' values (MPI_Allreduce over the TCP transport) into its own at each step, so
 * the final values depend on every step of every rank, bit for bit. Rank 0 writes its step to
 * OUT/progress every 10 steps and, at the end, every rank's final value (hex floats) to
 * OUT/result.
 *
 * Usage: mpi_ring STEPS OUT */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void write_file(const char* dir, const char* name, const char* text) {
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE* f = fopen(tmp, "w");
  if (f == NULL) return;
  fputs(text, f);
  fclose(f);
  rename(tmp, path);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int steps = argc > 1 ? atoi(argv[1]) : 300;
  const char* out = argc > 2 ? argv[2] : ".";
  double x = rank + 1, sum = 0;
  for (int step = 0; step < steps; ++step) {
    MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    x = x * 0.75 + 1.0 / (sum + step + 1.0) + 0.001 * rank;
    if (rank == 0 && step % 10 == 0) {
      char text[32];
      snprintf(text, sizeof text, "%d\n", step);
      write_file(out, "progress", text);
    }
    usleep(20000);
  }
  double all[256] = {0};
  MPI_Gather(&x, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    char text[256 * 32] = "";
    size_t n = 0;
    for (int i = 0; i < size && i < 256; ++i) n += snprintf(text + n, sizeof text - n, "%s%a", i ? " " : "", all[i]);
    snprintf(text + n, sizeof text - n, "\n");
    write_file(out, "result", text);
  }
  MPI_Finalize();
  return 0;
}
