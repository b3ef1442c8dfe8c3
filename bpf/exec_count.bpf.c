/* exec_count.bpf.c — count exec() per cgroup v2 id, in the kernel, without losing increments.
 *
 * Attached to the sched:sched_process_exec tracepoint (kprobes are not available on these
 * kernels). Keyed by bpf_get_current_cgroup_id(): a simulated node is a cgroup v2 child, a real
 * node's count is the sum over keys. A window is the delta of two snapshots.
 */
#include "swarmscope.h"

BPF_PERCPU_HASH(exec_count, u64, u64, SS_MAX_KEYS);

TRACEPOINT_PROBE(sched, sched_process_exec)
{
    u64 cg = bpf_get_current_cgroup_id();
    u64 zero = 0, *v = exec_count.lookup_or_try_init(&cg, &zero);
    if (v)
        *v += 1;
    return 0;
}
