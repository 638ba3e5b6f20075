/* A two-line MPI check for a new Slurm setup: every rank prints its rank, the
 * job size, the host, the result of an MPI_Allreduce (the number of ranks whose
 * rank is odd) and the CPUs it may run on, e.g. under task/affinity with
 * --cpus-per-task=1:
 *   rank 0/2 on vm: allreduce sum 1, CPUs 0
 *   rank 1/2 on vm: allreduce sum 1, CPUs 1
 *
 *   mpicc -O2 -o /tmp/mpihello slurm/mpihello.c
 *   srun --mpi=pmix -n 2 --cpus-per-task=1 /tmp/mpihello
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0, odd = 0, sum = 0, length = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char host[MPI_MAX_PROCESSOR_NAME];
  MPI_Get_processor_name(host, &length);
  odd = rank % 2;
  MPI_Allreduce(&odd, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);

  /* The affinity mask as a CPU list: "0-3,8". */
  char cpus[1024] = "";
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &mask)) continue;
      int last = cpu;
      while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &mask)) ++last;
      char part[32];
      if (last > cpu) snprintf(part, sizeof(part), "%s%d-%d", cpus[0] ? "," : "", cpu, last);
      else snprintf(part, sizeof(part), "%s%d", cpus[0] ? "," : "", cpu);
      if (strlen(cpus) + strlen(part) < sizeof(cpus)) strcat(cpus, part);
      cpu = last;
    }
  }
  printf("rank %d/%d on %s: allreduce sum %d, CPUs %s\n", rank, size, host, sum, cpus);
  MPI_Finalize();
  return 0;
}
