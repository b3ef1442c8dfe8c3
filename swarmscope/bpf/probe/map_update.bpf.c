/* map_update.bpf.c — the kernel-side clock of map programming: every BPF_MAP_UPDATE_ELEM (2)
 * and BPF_MAP_UPDATE_BATCH (26) bpf() call, timed at sys_enter_bpf / sys_exit_bpf.
 *
 * kprobes/fentry are unavailable here, so the map cannot be identified inside the kernel; we
 * record the caller (tgid, tid), the map fd and the entry count read from the user's bpf_attr
 * (bpf_probe_read_user: union bpf_attr is uapi, stable, not a kernel struct) and user space
 * resolves (tgid, fd) -> map id through /proc/<tgid>/fdinfo/<fd>.
 *   mu_totals: per-CPU {calls, entries (processed, as written back by the kernel), first, last}
 *              keyed by {tgid, cmd, cgroup} (cgroup: the caller's v2 cgroup id)
 *   mu_events: one record per call (ring buffer); mu_drops counts records the buffer refused.
 * The call's start lives in task-local storage (no hash insert/delete per call; needs BTF, kernel
 * >= 5.11) and the ring buffer is submitted without a wakeup: its readers drain it by polling
 * (ring_buffer_consume every poll_s), nobody sleeps on it. Together with one 8-byte read of
 * count+map_fd this took the programs from ~1.1-1.3 µs to ~0.7-0.9 µs per call (bench/neighbors.py).
 * Only tgids present in mu_pids, or callers in a cgroup (v2 id) present in mu_cgroups, are
 * recorded unless mu_record_all[0] is 1; all are set by the loader and may change while attached
 * (a probe window picks its pids or its nodes' cgroups: a worker in a pod knows only its own pid
 * namespace's pids, never the host's tgid this program sees). All start empty, so nothing is
 * recorded until the loader has said what to record.
 */
#include "swarmscope.h"

#define CMD_UPDATE_ELEM 2
#define CMD_UPDATE_BATCH 26

#ifndef SS_RINGBUF_PAGES
#define SS_RINGBUF_PAGES 256
#endif

struct mu_start {
    u64 ts;  /* 0: no call in flight (set at exit instead of deleting: cheaper) */
    u64 uattr;
    u32 cmd;
    u32 count;   /* count and map_fd adjacent, as in bpf_attr.batch: one 8-byte read */
    u32 map_fd;
    u32 pad;
};

struct mu_key {
    u32 tgid;
    u32 cmd;
    u64 cgroup;
};

struct mu_total {
    u64 calls;
    u64 entries;
    u64 first_ns;
    u64 last_ns;
};

struct mu_event {
    u64 enter_ns;
    u64 exit_ns;
    u32 tgid;
    u32 tid;
    u32 cmd;
    u32 map_fd;
    u32 requested;
    u32 processed;
    s64 ret;
    u64 cgroup;
};

BPF_TASK_STORAGE(mu_start_map, struct mu_start);
BPF_HASH(mu_pids, u32, u8, 1024);
BPF_HASH(mu_cgroups, u64, u8, 1024);
BPF_ARRAY(mu_record_all, u8, 1);
BPF_PERCPU_HASH(mu_totals, struct mu_key, struct mu_total, 4096);
BPF_PERCPU_ARRAY(mu_drops, u64, 1);
BPF_RINGBUF_OUTPUT(mu_events, SS_RINGBUF_PAGES);

TRACEPOINT_PROBE(syscalls, sys_enter_bpf)
{
    u32 cmd = (u32)args->cmd;
    if (cmd != CMD_UPDATE_ELEM && cmd != CMD_UPDATE_BATCH)
        return 0;
    u64 id = bpf_get_current_pid_tgid();
    u32 zero = 0, tgid = id >> 32;
    u8 *all = mu_record_all.lookup(&zero);
    if (!(all && *all) && !mu_pids.lookup(&tgid)) {
        u64 cg = bpf_get_current_cgroup_id();
        if (!mu_cgroups.lookup(&cg))
            return 0;
    }
    struct mu_start *sp =
        mu_start_map.task_storage_get(bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
    if (!sp)
        return 0;
    struct mu_start s = {};
    s.ts = bpf_ktime_get_ns();
    s.cmd = cmd;
    s.uattr = (u64)args->uattr;
    if (cmd == CMD_UPDATE_ELEM) {
        bpf_probe_read_user(&s.map_fd, 4, (void *)args->uattr);  /* attr.map_fd at 0 */
        s.count = 1;
    } else {
        bpf_probe_read_user(&s.count, 8, (void *)args->uattr + 32);  /* batch.count, batch.map_fd */
    }
    *sp = s;
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_bpf)
{
    u64 id = bpf_get_current_pid_tgid();
    struct mu_start *s = mu_start_map.task_storage_get(bpf_get_current_task_btf(), 0, 0);
    if (!s || !s->ts)
        return 0;
    u64 now = bpf_ktime_get_ns();
    u32 processed = s->count;
    /* a batch writes back how many it processed; on success that is all it was given */
    if (s->cmd == CMD_UPDATE_BATCH && args->ret != 0)
        bpf_probe_read_user(&processed, 4, (void *)s->uattr + 32);
    else if (args->ret != 0)
        processed = 0;
    u64 cg = bpf_get_current_cgroup_id();
    struct mu_key k = {.tgid = id >> 32, .cmd = s->cmd, .cgroup = cg};
    struct mu_total zero = {}, *t = mu_totals.lookup_or_try_init(&k, &zero);
    if (t) {
        t->calls += 1;
        t->entries += processed;
        if (t->first_ns == 0)
            t->first_ns = s->ts;
        t->last_ns = now;
    }
    struct mu_event *e = mu_events.ringbuf_reserve(sizeof(struct mu_event));
    if (e) {
        e->enter_ns = s->ts;
        e->exit_ns = now;
        e->tgid = id >> 32;
        e->tid = (u32)id;
        e->cmd = s->cmd;
        e->map_fd = s->map_fd;
        e->requested = s->count;
        e->processed = processed;
        e->ret = args->ret;
        e->cgroup = cg;
        mu_events.ringbuf_submit(e, BPF_RB_NO_WAKEUP);
    } else {
        u32 z = 0;
        u64 *d = mu_drops.lookup(&z);
        if (d)
            *d += 1;
    }
    s->ts = 0;
    return 0;
}
