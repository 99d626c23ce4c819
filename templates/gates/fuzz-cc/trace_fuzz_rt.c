/* trace's coverage runtime for the fuzzing gate (templates/gates/fuzz-cc): gcc's
 * -fsanitize-coverage=trace-pc calls __sanitizer_cov_trace_pc() at every basic block of the
 * instrumented code. Each call counts the edge (previous block, this block) in a byte map of
 * MAP_SIZE counters, AFL-style. The map is the file named by $TRACE_FUZZ_MAP, shared (mmap
 * MAP_SHARED) by every process and every object of the program that carries this runtime, so
 * one run's map holds all its targets' edges; without the variable, calls count into a
 * private array and nothing is written. A block is named by its offset from this runtime's own
 * code in the same object (hidden symbols: one copy per executable or shared library), so
 * the names do not move with address-space randomisation. Compiled WITHOUT the coverage flag.
 *
 * The fork server (trace_sandbox/gates/fuzz_server.py is the other end): when
 * $TRACE_FUZZ_SERVER is "CTL,STATUS,PATH" and this process is the executable PATH itself (its
 * argv[0] and the kernel's AT_EXECFN: not a script's interpreter, not a program a script
 * started), the executable's last constructor does not return. It says hello on STATUS and
 * serves: each request on CTL (u32 length, then NUL-ended strings: work directory, stdin
 * file, stdout file, stderr file, argv...) is one fork(); the child takes the request's
 * directory, standard streams and arguments, runs the constructors that come after this one
 * and then main; the server answers the child's pid, then its wait status. No exec, no
 * dynamic loading, no sanitizer start-up per run. The coverage counted before the fork (other
 * constructors' code) is added again to the map in each child, so a run's map is the one an
 * exec of the same command would fill. Any check failing: the program just runs (the other
 * end times out or reads EOF and falls back to exec). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAP_SIZE 65536u
#define SERVER_HELLO 0x31534654u /* "TFS1" */
#define MAX_REQUEST (1u << 24)

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

/* --- the fork server --------------------------------------------------------------------- */

/* Weak and hidden: the executable's own main, or 0 in a shared library (no server there). */
extern int main(int, char **, char **) __attribute__((weak, visibility("hidden")));
typedef void (*trace_fuzz_ctor)(int, char **, char **);
extern trace_fuzz_ctor __init_array_start[] __attribute__((weak, visibility("hidden")));
extern trace_fuzz_ctor __init_array_end[] __attribute__((weak, visibility("hidden")));
extern char **environ;

/* the map as the constructors left it, as (slot, count) pairs: most programs have none */
static uint32_t trace_fuzz_before[MAP_SIZE];
static uint32_t trace_fuzz_nbefore;

static int trace_fuzz_io(int fd, void *buf, size_t n, int writing) {
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = writing ? write(fd, p, n) : read(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static void trace_fuzz_redirect(const char *path, int fd, int flags) {
    int f = open(*path ? path : "/dev/null", flags, 0644);
    if (f < 0)
        _exit(127);
    if (f != fd) {
        dup2(f, fd);
        close(f);
    }
}

static void trace_fuzz_ctor_last(int argc, char **argv, char **envp);

/* In the forked child: become the requested run (the strings: cwd, in, out, err, argv...);
 * `argv` has room for len + 1 pointers. */
static void trace_fuzz_child(char *req, uint32_t len, char **argv, int ctl, int st) {
    char *s[4];
    int argc = 0, n = 0;
    for (char *p = req; p < req + len; p += strlen(p) + 1) {
        if (n < 4)
            s[n++] = p;
        else
            argv[argc++] = p;
    }
    close(ctl);
    close(st);
    if (n < 4 || argc < 1 || chdir(s[0]) != 0)
        _exit(127);
    trace_fuzz_redirect(s[1], 0, O_RDONLY);
    trace_fuzz_redirect(s[2], 1, O_WRONLY | O_CREAT | O_TRUNC);
    trace_fuzz_redirect(s[3], 2, O_WRONLY | O_CREAT | O_TRUNC);
    if (trace_fuzz_map == NULL)
        trace_fuzz_init();
    for (uint32_t k = 0; k < trace_fuzz_nbefore; k++) {
        unsigned char *slot = &trace_fuzz_map[trace_fuzz_before[k] >> 8];
        unsigned sum = (unsigned)*slot + (trace_fuzz_before[k] & 255u);
        *slot = sum > 255 ? 255 : (unsigned char)sum;
    }
    int after = 0; /* the constructors after this one, as the exec would have run them */
    for (trace_fuzz_ctor *c = __init_array_start; c && c < __init_array_end; c++) {
        if (after && *c)
            (*c)(argc, argv, environ);
        after = after || *c == trace_fuzz_ctor_last;
    }
    exit(main(argc, argv, environ));
}

static void trace_fuzz_serve(int ctl, int st) {
    for (;;) {
        uint32_t len;
        if (trace_fuzz_io(ctl, &len, sizeof len, 0) != 0 || len > MAX_REQUEST)
            _exit(0); /* the other end is gone: so is the server */
        /* mmap, not malloc: the runs start with the heap an exec would give them */
        size_t room = (len + 8) & ~(size_t)7, size = room + (len + 2) * sizeof(char *);
        char *req = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (req == MAP_FAILED || trace_fuzz_io(ctl, req, len, 0) != 0)
            _exit(0);
        pid_t pid = fork();
        if (pid == 0)
            trace_fuzz_child(req, len, (char **)(req + room), ctl, st);
        int32_t answer[2] = {pid < 0 ? -errno : (int32_t)pid, 0};
        if (trace_fuzz_io(st, &answer[0], sizeof answer[0], 1) != 0)
            _exit(0);
        munmap(req, size);
        if (pid < 0)
            continue;
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        answer[1] = status;
        if (trace_fuzz_io(st, &answer[1], sizeof answer[1], 1) != 0)
            _exit(0);
    }
}

static void trace_fuzz_remember(void) {
    for (uint32_t i = 0; i < MAP_SIZE; i++)
        if (trace_fuzz_map[i])
            trace_fuzz_before[trace_fuzz_nbefore++] = i << 8 | trace_fuzz_map[i];
}

/* Unprioritised and in the runtime object, which the wrapper links last: the executable's last
 * constructor (any after it run in each child). */
__attribute__((constructor)) static void trace_fuzz_ctor_last(int argc, char **argv, char **envp) {
    (void)envp;
    const char *spec = getenv("TRACE_FUZZ_SERVER");
    int ctl, st, at = 0;
    if (spec == NULL || main == NULL || argc < 1)
        return;
    if (sscanf(spec, "%d,%d,%n", &ctl, &st, &at) != 2 || at == 0)
        return;
    const char *path = spec + at;
    const char *execfn = (const char *)getauxval(AT_EXECFN);
    if (strcmp(argv[0], path) != 0 || execfn == NULL || strcmp(execfn, path) != 0)
        return;
    unsetenv("TRACE_FUZZ_SERVER"); /* the runs see the environment an exec would give them */
    if (trace_fuzz_map == NULL)
        trace_fuzz_init();
    trace_fuzz_remember();
    uint32_t hello = SERVER_HELLO;
    if (trace_fuzz_io(st, &hello, sizeof hello, 1) != 0)
        return;
    trace_fuzz_serve(ctl, st);
}
