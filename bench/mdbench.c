/*
 * mdbench — an MPI-free metadata benchmark in the shape of mdtest.
 *
 * mdtest (IOR project) is not packaged in Debian and needs MPI; this program
 * reproduces its workload with fork() instead of MPI ranks so that Tessera can
 * be compared with a local directory and with libfuse's passthrough_ll.
 *
 * Layout (like `mdtest -u`): every process works in its own tree under DIR:
 *
 *   DIR/p<k>                      tree root of process k (depth 0)
 *   DIR/p<k>/d.<i>/d.<j>/...      tree nodes, branching factor -b, depth -z
 *   <node>/dir.<n>, <node>/file.<n>  the items of each node (-I per node)
 *
 * Phases, in mdtest order, each timed between two barriers across all
 * processes (rate = total operations / wall time of the slowest process):
 *
 *   tree_create   mkdir every tree node (parents first)
 *   dir_create    mkdir  <node>/dir.<n>   for every node and item
 *   dir_stat      stat   <node>/dir.<n>
 *   dir_remove    rmdir  <node>/dir.<n>
 *   file_create   open(O_CREAT|O_EXCL) + write -w bytes + close  <node>/file.<n>
 *   file_stat     stat   <node>/file.<n>
 *   file_read     open + read -e bytes + close
 *   file_remove   unlink <node>/file.<n>
 *   tree_remove   rmdir every tree node (children first)
 *
 * With -S SEC the parent pauses SEC seconds (untimed) before dir_stat,
 * file_stat and file_read: on a FUSE mount the kernel caches entries and
 * attributes for a timeout (1 s by default), so without the pause a target
 * that created its items faster gets more of its stats answered by the kernel.
 *
 * Output: one parseable line per phase (mean over -i iterations):
 *
 *   result tag=T procs=P phase=dir_create ops=12440 seconds=1.234567 ops_per_sec=10077.3
 *
 * Build: gcc -O2 -Wall -o mdbench mdbench.c
 * Examples:
 *   mdbench -d /mnt/x/md -b 6 -z 4 -I 8          # like mdtest -b 6 -z 4 -I 8 (12,440 items)
 *   mdbench -d /mnt/x/md -n 5000 -P 4            # flat: 5000 items per process, 4 processes
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum phase {
    TREE_CREATE, DIR_CREATE, DIR_STAT, DIR_REMOVE,
    FILE_CREATE, FILE_STAT, FILE_READ, FILE_REMOVE, TREE_REMOVE,
    NPHASES
};
static const char *phase_name[NPHASES] = {
    "tree_create", "dir_create", "dir_stat", "dir_remove",
    "file_create", "file_stat", "file_read", "file_remove", "tree_remove",
};

#define MAXPROCS 256

/* Shared between the parent and the workers (MAP_SHARED anonymous memory). */
struct shared {
    pthread_barrier_t barrier;
    double start[MAXPROCS][NPHASES];
    double end[MAXPROCS][NPHASES];
    long ops[MAXPROCS][NPHASES];
    long errors[MAXPROCS];
};

static struct {
    const char *dir;
    int branch, depth, items, total_items, procs, iterations, verbose;
    double settle;
    size_t write_bytes, read_bytes;
    const char *tag;
} opt = { .branch = 1, .depth = 0, .items = -1, .total_items = -1,
          .procs = 1, .iterations = 1, .tag = "run" };

static struct shared *sh;
static char **nodes;    /* node paths relative to the process's tree root, pre-order */
static long nnodes;
static int items_per_node;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mdbench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

static void usage(int code)
{
    fprintf(code ? stderr : stdout,
"usage: mdbench -d DIR [-b BRANCH] [-z DEPTH] (-I ITEMS_PER_NODE | -n ITEMS_PER_PROC)\n"
"               [-P PROCS] [-i ITERATIONS] [-w WRITE_BYTES] [-e READ_BYTES] [-S SECONDS]\n"
"               [-t TAG] [-v]\n"
"  -d DIR   working directory (created if missing; must be empty of p<k> names)\n"
"  -b N     branching factor of the tree (default 1)\n"
"  -z N     depth of the tree, 0 = a single directory (default 0)\n"
"  -I N     items (files, and separately directories) per tree node\n"
"  -n N     items per process, spread evenly over the tree nodes (like mdtest -n)\n"
"  -P N     processes, each in its own tree DIR/p<k> (default 1)\n"
"  -i N     iterations; results are the mean rate (default 1)\n"
"  -w N     bytes written into each file at creation (default 0, as mdtest)\n"
"  -e N     bytes read from each file in file_read (default 0, as mdtest)\n"
"  -S SEC   settle: pause SEC seconds (untimed) before dir_stat, file_stat and\n"
"           file_read, so that kernel entry/attribute caches of FUSE mounts have\n"
"           expired and every target answers from its file system (default 0)\n"
"  -t TAG   label copied to every result line\n"
"  -v       print per-iteration lines too\n");
    exit(code);
}

/* Build the pre-order list of tree nodes ("" is the root). */
static void add_nodes(const char *prefix, int level)
{
    nodes = realloc(nodes, (nnodes + 1) * sizeof *nodes);
    nodes[nnodes++] = strdup(prefix);
    if (level == opt.depth)
        return;
    for (int i = 0; i < opt.branch; i++) {
        char buf[4096];
        snprintf(buf, sizeof buf, "%s/d.%d", prefix, i);
        add_nodes(buf, level + 1);
    }
}

static void fail(int me, const char *op, const char *path)
{
    if (sh->errors[me]++ < 5)
        fprintf(stderr, "mdbench[%d]: %s %s: %s\n", me, op, path, strerror(errno));
}

static void run_phase(int me, enum phase ph, const char *root, char *wbuf, char *rbuf)
{
    char path[8192];
    long ops = 0;

    pthread_barrier_wait(&sh->barrier);
    sh->start[me][ph] = now();

    if (ph == TREE_CREATE || ph == TREE_REMOVE) {
        for (long k = 0; k < nnodes; k++) {
            long n = ph == TREE_CREATE ? k : nnodes - 1 - k;
            snprintf(path, sizeof path, "%s%s", root, nodes[n]);
            if ((ph == TREE_CREATE ? mkdir(path, 0755) : rmdir(path)) != 0)
                fail(me, phase_name[ph], path);
            ops++;
        }
    } else {
        for (long n = 0; n < nnodes; n++) {
            for (int i = 0; i < items_per_node; i++) {
                struct stat st;
                int fd;
                ssize_t r;
                int is_dir = ph <= DIR_REMOVE;
                snprintf(path, sizeof path, "%s%s/%s.%d", root, nodes[n],
                         is_dir ? "dir" : "file", i);
                switch (ph) {
                case DIR_CREATE:
                    if (mkdir(path, 0755) != 0) fail(me, "mkdir", path);
                    break;
                case DIR_STAT:
                case FILE_STAT:
                    if (stat(path, &st) != 0) fail(me, "stat", path);
                    break;
                case DIR_REMOVE:
                    if (rmdir(path) != 0) fail(me, "rmdir", path);
                    break;
                case FILE_CREATE:
                    fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
                    if (fd < 0) { fail(me, "create", path); break; }
                    if (opt.write_bytes &&
                        write(fd, wbuf, opt.write_bytes) != (ssize_t)opt.write_bytes)
                        fail(me, "write", path);
                    if (close(fd) != 0) fail(me, "close", path);
                    break;
                case FILE_READ:
                    fd = open(path, O_RDONLY);
                    if (fd < 0) { fail(me, "open", path); break; }
                    if (opt.read_bytes) {
                        size_t want = opt.read_bytes < opt.write_bytes ? opt.read_bytes
                                                                       : opt.write_bytes;
                        r = read(fd, rbuf, opt.read_bytes);
                        if (r != (ssize_t)want) {
                            if (r >= 0) errno = EIO;
                            fail(me, "read", path);
                        }
                    }
                    close(fd);
                    break;
                case FILE_REMOVE:
                    if (unlink(path) != 0) fail(me, "unlink", path);
                    break;
                default:
                    break;
                }
                ops++;
            }
        }
    }

    sh->end[me][ph] = now();
    sh->ops[me][ph] = ops;
    pthread_barrier_wait(&sh->barrier);
}

static void worker(int me)
{
    char root[4096];
    char *wbuf = malloc(opt.write_bytes + 1), *rbuf = malloc(opt.read_bytes + 1);
    if (!wbuf || !rbuf)
        die("out of memory");
    for (size_t i = 0; i < opt.write_bytes; i++)
        wbuf[i] = 'a' + (i + me) % 26;
    snprintf(root, sizeof root, "%s/p%d", opt.dir, me);
    for (int it = 0; it < opt.iterations; it++)
        for (int ph = 0; ph < NPHASES; ph++)
            run_phase(me, ph, root, wbuf, rbuf);
    _exit(sh->errors[me] ? 1 : 0);
}

int main(int argc, char **argv)
{
    int c;
    while ((c = getopt(argc, argv, "d:b:z:I:n:P:i:w:e:S:t:vh")) != -1) {
        switch (c) {
        case 'd': opt.dir = optarg; break;
        case 'b': opt.branch = atoi(optarg); break;
        case 'z': opt.depth = atoi(optarg); break;
        case 'I': opt.items = atoi(optarg); break;
        case 'n': opt.total_items = atoi(optarg); break;
        case 'P': opt.procs = atoi(optarg); break;
        case 'i': opt.iterations = atoi(optarg); break;
        case 'w': opt.write_bytes = strtoul(optarg, NULL, 0); break;
        case 'e': opt.read_bytes = strtoul(optarg, NULL, 0); break;
        case 'S': opt.settle = atof(optarg); break;
        case 't': opt.tag = optarg; break;
        case 'v': opt.verbose = 1; break;
        case 'h': usage(0); break;
        default: usage(2);
        }
    }
    if (!opt.dir || optind != argc)
        usage(2);
    if ((opt.items < 0) == (opt.total_items < 0))
        die("give exactly one of -I and -n");
    if (opt.branch < 1 || opt.depth < 0 || opt.procs < 1 || opt.procs > MAXPROCS ||
        opt.iterations < 1)
        die("bad -b/-z/-P/-i value");

    add_nodes("", 0);
    items_per_node = opt.items >= 0 ? opt.items : (int)(opt.total_items / nnodes);
    if (opt.total_items >= 0 && opt.total_items % nnodes)
        fprintf(stderr, "mdbench: note: -n %d is not a multiple of %ld nodes; using %d per node\n",
                opt.total_items, nnodes, items_per_node);

    if (mkdir(opt.dir, 0755) != 0 && errno != EEXIST)
        die("mkdir %s: %s", opt.dir, strerror(errno));

    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        die("mmap: %s", strerror(errno));
    pthread_barrierattr_t ba;
    pthread_barrierattr_init(&ba);
    pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
    /* The parent joins every barrier too, so it knows when a phase is over. */
    pthread_barrier_init(&sh->barrier, &ba, opt.procs + 1);

    fflush(stdout);
    pid_t pids[MAXPROCS];
    for (int k = 0; k < opt.procs; k++) {
        pids[k] = fork();
        if (pids[k] < 0)
            die("fork: %s", strerror(errno));
        if (pids[k] == 0)
            worker(k);
    }

    double rate_sum[NPHASES] = {0}, sec_sum[NPHASES] = {0};
    long ops_total[NPHASES] = {0};
    for (int it = 0; it < opt.iterations; it++) {
        for (int ph = 0; ph < NPHASES; ph++) {
            if (opt.settle > 0 && (ph == DIR_STAT || ph == FILE_STAT || ph == FILE_READ)) {
                /* The workers wait at the barrier until the parent joins it. */
                struct timespec ts = { (time_t)opt.settle,
                                       (long)((opt.settle - (time_t)opt.settle) * 1e9) };
                nanosleep(&ts, NULL);
            }
            pthread_barrier_wait(&sh->barrier);   /* phase starts */
            pthread_barrier_wait(&sh->barrier);   /* phase done */
            double t0 = sh->start[0][ph], t1 = sh->end[0][ph];
            long ops = 0;
            for (int k = 0; k < opt.procs; k++) {
                if (sh->start[k][ph] < t0) t0 = sh->start[k][ph];
                if (sh->end[k][ph] > t1) t1 = sh->end[k][ph];
                ops += sh->ops[k][ph];
            }
            double secs = t1 - t0, rate = secs > 0 ? ops / secs : 0;
            rate_sum[ph] += rate;
            sec_sum[ph] += secs;
            ops_total[ph] = ops;
            if (opt.verbose)
                printf("iter tag=%s procs=%d iteration=%d phase=%s ops=%ld seconds=%.6f ops_per_sec=%.1f\n",
                       opt.tag, opt.procs, it, phase_name[ph], ops, secs, rate);
        }
    }

    int status, bad = 0;
    for (int k = 0; k < opt.procs; k++) {
        waitpid(pids[k], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            bad = 1;
    }
    long errors = 0;
    for (int k = 0; k < opt.procs; k++)
        errors += sh->errors[k];

    printf("config tag=%s procs=%d branch=%d depth=%d nodes_per_proc=%ld items_per_node=%d "
           "write_bytes=%zu read_bytes=%zu settle=%g iterations=%d errors=%ld\n",
           opt.tag, opt.procs, opt.branch, opt.depth, nnodes, items_per_node,
           opt.write_bytes, opt.read_bytes, opt.settle, opt.iterations, errors);
    for (int ph = 0; ph < NPHASES; ph++)
        printf("result tag=%s procs=%d phase=%s ops=%ld seconds=%.6f ops_per_sec=%.1f\n",
               opt.tag, opt.procs, phase_name[ph], ops_total[ph],
               sec_sum[ph] / opt.iterations, rate_sum[ph] / opt.iterations);
    if (bad || errors)
        fprintf(stderr, "mdbench: %ld operation(s) failed\n", errors);
    return bad || errors ? 1 : 0;
}
