/* trace's coverage runtime for the fuzzing gate (templates/gates/fuzz-cc): gcc's
 * -fsanitize-coverage=trace-pc calls __sanitizer_cov_trace_pc() at every basic block of the
 * instrumented code. Each call counts the edge (previous block, this block) in a byte map of
 * MAP_SIZE counters, AFL-style. The map is the file named by $TRACE_FUZZ_MAP, shared (mmap
 * MAP_SHARED) by every process and every object of the program that carries this runtime, so
 * one run's map holds all its targets' edges; without the variable, calls count into a
 * private array and nothing is written. A block is named by its offset from this runtime's own
 * code in the same object (hidden symbols: one copy per executable or shared library), so
 * the names do not move with address-space randomisation. Compiled WITHOUT the coverage flag. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAP_SIZE 65536u

static unsigned char trace_fuzz_private[MAP_SIZE];
static unsigned char *trace_fuzz_map;
static uintptr_t trace_fuzz_prev;

static void trace_fuzz_init(void) {
    const char *path = getenv("TRACE_FUZZ_MAP");
    trace_fuzz_map = trace_fuzz_private;
    if (path == NULL || *path == '\0')
        return;
    int fd = open(path, O_RDWR);
    if (fd < 0)
        return;
    void *m = mmap(NULL, MAP_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m != MAP_FAILED)
        trace_fuzz_map = (unsigned char *)m;
}

__attribute__((visibility("hidden"))) void __sanitizer_cov_trace_pc(void) {
    if (trace_fuzz_map == NULL)
        trace_fuzz_init();
    uintptr_t pc = (uintptr_t)__builtin_return_address(0) - (uintptr_t)&trace_fuzz_init;
    uintptr_t cur = (pc ^ (pc >> 16)) * 0x9E3779B1u;
    cur = (cur >> 8) & (MAP_SIZE - 1);
    unsigned char *slot = &trace_fuzz_map[cur ^ trace_fuzz_prev];
    if (*slot != 255)
        *slot += 1;
    trace_fuzz_prev = cur >> 1;
}
