/* exec_count.bpf.c — count exec() per cgroup v2 id, in the kernel, without losing increments,
 * and keep the first and last exec time of the current window per cgroup.
 *
 * Attached to the sched:sched_process_exec tracepoint (kprobes are not available on these
 * kernels). Keyed by bpf_get_current_cgroup_id(): a simulated node is a cgroup v2 child, a real
 * node's count is the sum over keys. A window is the delta of two snapshots of exec_count.
 *
 * Times (bpf_ktime_get_ns, CLOCK_MONOTONIC): exec_times holds per CPU {first, last}. User space
 * writes a window's open time into exec_open (key: the node's cgroup id; key 0: every cgroup,
 * for a host node) before the window's first snapshot; an exec whose cgroup's `first` is older
 * than that open time restarts `first`, so an earlier window's times never count. The count map
 * is separate and updated first, so the count stays as exact and as cheap to read as before.
 */
#include "swarmscope.h"

struct exec_times {
    u64 first;
    u64 last;
};

BPF_PERCPU_HASH(exec_count, u64, u64, SS_MAX_KEYS);
BPF_PERCPU_HASH(exec_times, u64, struct exec_times, SS_MAX_KEYS);
BPF_HASH(exec_open, u64, u64, SS_MAX_KEYS);

TRACEPOINT_PROBE(sched, sched_process_exec)
{
    u64 cg = bpf_get_current_cgroup_id();
    u64 zero = 0, *v = exec_count.lookup_or_try_init(&cg, &zero);
    if (v)
        *v += 1;

#ifndef SS_EXEC_COUNT_ONLY /* bench/probes.py: the count alone, as the reference cost */
    u64 now = bpf_ktime_get_ns();
    struct exec_times init = {now, now}, *t = exec_times.lookup_or_try_init(&cg, &init);
    if (!t)
        return 0;
    u64 *open = exec_open.lookup(&cg);
    if (!open) {
        u64 any = 0;
        open = exec_open.lookup(&any);
    }
    /* Per-CPU slot: no other writer, so two plain stores are enough. */
    if (open && t->first < *open)
        t->first = now;
    t->last = now;
#endif
    return 0;
}
