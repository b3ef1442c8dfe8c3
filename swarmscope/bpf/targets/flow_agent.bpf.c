/* flow_agent.bpf.c — the reference eBPF flow agent's datapath (targets/flow_agent), built the
 * way the NetObserv write-up describes its agent: a per-CPU hash map aggregates packets into
 * flows (cacheMaxFlows entries, -DCACHE_MAX_FLOWS), user space evicts it every cacheTimeout or
 * when it is full; a packet whose flow is not in a full map goes to user space through a ring
 * buffer instead (the "accounter" path), and a record the ring buffer cannot take is a dropped
 * flow (counted). TC classifier (direct action), always TC_ACT_OK: it never changes traffic.
 * This is a system under test, not a probe: its counts are what gets reconciled.
 */
#include "swarmscope.h"
#include <uapi/linux/bpf.h>
#include "flow_key.h"
#include <uapi/linux/pkt_cls.h>

#ifndef CACHE_MAX_FLOWS
#define CACHE_MAX_FLOWS 100000
#endif
#ifndef RINGBUF_PAGES
#define RINGBUF_PAGES 64
#endif

struct flow_val {
    u64 packets;
    u64 bytes;
    u64 first_ns;
    u64 last_ns;
};

struct flow_rec {
    struct flow_key key;
    struct flow_val val;
};

BPF_PERCPU_HASH(aggregated_flows, struct flow_key, struct flow_val, CACHE_MAX_FLOWS);
BPF_RINGBUF_OUTPUT(direct_flows, RINGBUF_PAGES);
BPF_PERCPU_ARRAY(agent_stats, u64, 2); /* 0: ring-buffer records, 1: dropped flows */

int flow_agent_tc(struct __sk_buff *skb)
{
    void *data = (void *)(long)skb->data;
    void *data_end = (void *)(long)skb->data_end;
    struct flow_key k = {};
    if (flow_key_parse(data, data_end, &k) != 0)
        return TC_ACT_OK;
    u64 len = skb->len, now = bpf_ktime_get_ns();
    struct flow_val *v = aggregated_flows.lookup(&k);
    if (v) { /* this CPU's slot: no other writer */
        v->packets += 1;
        v->bytes += len;
        v->last_ns = now;
        return TC_ACT_OK;
    }
    struct flow_val nv = {1, len, now, now};
    if (aggregated_flows.update(&k, &nv) == 0)
        return TC_ACT_OK;
    /* The map is full: this packet goes to user space on its own. */
    struct flow_rec r = {};
    r.key = k;
    r.val = nv;
    u32 slot = direct_flows.ringbuf_output(&r, sizeof(r), 0) == 0 ? 0 : 1;
    u64 *c = agent_stats.lookup(&slot);
    if (c)
        *c += 1;
    return TC_ACT_OK;
}
