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
 * Only tgids present in mu_pids are recorded unless mu_record_all[0] is 1; both are set by the
 * loader and may change while attached (a probe window picks its pids). Both start at zero, so
 * nothing is recorded until the loader has said what to record.
 */
#include "swarmscope.h"

#define CMD_UPDATE_ELEM 2
#define CMD_UPDATE_BATCH 26

#ifndef SS_RINGBUF_PAGES
#define SS_RINGBUF_PAGES 256
#endif

struct mu_start {
    u64 ts;
    u64 uattr;
    u32 cmd;
    u32 map_fd;
    u32 count;
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

BPF_HASH(mu_start_map, u64, struct mu_start, 4096);
BPF_HASH(mu_pids, u32, u8, 1024);
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
    if (!(all && *all) && !mu_pids.lookup(&tgid))
        return 0;
    struct mu_start s = {};
    s.ts = bpf_ktime_get_ns();
    s.cmd = cmd;
    s.uattr = (u64)args->uattr;
    if (cmd == CMD_UPDATE_ELEM) {
        bpf_probe_read_user(&s.map_fd, 4, (void *)args->uattr);  /* attr.map_fd at 0 */
        s.count = 1;
    } else {
        bpf_probe_read_user(&s.count, 4, (void *)args->uattr + 32);  /* batch.count */
        bpf_probe_read_user(&s.map_fd, 4, (void *)args->uattr + 36); /* batch.map_fd */
    }
    mu_start_map.update(&id, &s);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_bpf)
{
    u64 id = bpf_get_current_pid_tgid();
    struct mu_start *s = mu_start_map.lookup(&id);
    if (!s)
        return 0;
    u64 now = bpf_ktime_get_ns();
    u32 processed = s->count;
    if (s->cmd == CMD_UPDATE_BATCH)  /* the kernel writes back how many it processed */
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
        mu_events.ringbuf_submit(e, 0);
    } else {
        u32 z = 0;
        u64 *d = mu_drops.lookup(&z);
        if (d)
            *d += 1;
    }
    mu_start_map.delete(&id);
    return 0;
}
