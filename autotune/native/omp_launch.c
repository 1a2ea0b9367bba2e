/* Parallel loops of TVM-compiled CPU kernels on the process's OpenMP thread pool (PyTorch's).
 *
 * A kernel library calls TVMBackendParallelLaunch / TVMBackendParallelBarrier through the pointers
 * __TVMBackendParallelLaunch / __TVMBackendParallelBarrier it holds; autotune.thread_pool points them here.
 * Then TVM's kernels and PyTorch's eager ops run on the same threads, and neither pool spins against the
 * other. The signatures are those of tvm/runtime/c_backend_api.h. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>

typedef struct {
  void* sync_handle;
  int32_t num_task;
} TVMParallelGroupEnv;

typedef int (*FTVMParallelLambda)(int task_id, TVMParallelGroupEnv* penv, void* cdata);

static int pool_threads = 0; /* threads per launch; 0: omp_get_max_threads() */
static int forked = 0;       /* in a child of fork(): the pool's threads stayed in the parent */

static void after_fork_in_child(void) { forked = 1; }

__attribute__((constructor)) static void watch_fork(void) { pthread_atfork(0, 0, after_fork_in_child); }

void autotune_omp_set_threads(int n) { pool_threads = n; }

/* The file of the OpenMP runtime this launcher runs on (to check that it is PyTorch's). */
const char* autotune_omp_runtime(void) {
  Dl_info info;
  return dladdr((void*)&omp_get_num_threads, &info) && info.dli_fname ? info.dli_fname : "";
}

int autotune_omp_threads(void) { return pool_threads > 0 ? pool_threads : omp_get_max_threads(); }

int autotune_omp_launch(FTVMParallelLambda flambda, void* cdata, int num_task) {
  int n = num_task > 0 ? num_task : autotune_omp_threads();
  int failed = 0;
  /* One task, a call from a parallel region, or a forked child (where a parallel region would wait forever for
   * the parent's threads): this thread does it all. */
  if (n <= 1 || forked || omp_in_parallel()) {
    TVMParallelGroupEnv env = {0, 1};
    return flambda(0, &env, cdata) == 0 ? 0 : -1;
  }
#pragma omp parallel num_threads(n) reduction(| : failed)
  {
    TVMParallelGroupEnv env = {0, omp_get_num_threads()};
    failed |= flambda(omp_get_thread_num(), &env, cdata) != 0;
  }
  return failed ? -1 : 0;
}

int autotune_omp_barrier(int task_id, TVMParallelGroupEnv* penv) {
  (void)task_id;
  (void)penv;
#pragma omp barrier
  return 0;
}
