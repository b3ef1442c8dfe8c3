/* flow_key.h — the IPv4 5-tuple of a packet, shared by flow_count.bpf.c (the kernel truth) and
 * flow_agent.bpf.c (the reference agent under test), so both key flows the same way.
 *
 * flow_key_parse(data, data_end, &k) fills k from an Ethernet frame and returns 0, or returns
 * -1 for a frame that is not IPv4 (k untouched). Addresses stay in network byte order, ports
 * are host order, read for TCP and UDP first fragments only (0 otherwise).
 */
#ifndef SWARMSCOPE_FLOW_KEY_H
#define SWARMSCOPE_FLOW_KEY_H

struct flow_key {
    u32 saddr;
    u32 daddr;
    u16 sport;
    u16 dport;
    u8 proto;
    u8 pad[3];
};

static __always_inline int flow_key_parse(void *data, void *data_end, struct flow_key *k)
{
    unsigned char *p = data;
    if (data + 34 > data_end || p[12] != 0x08 || p[13] != 0x00)
        return -1;
    unsigned char *ip = p + 14;
    u32 ihl = (ip[0] & 0x0f) * 4;
    __builtin_memcpy(&k->saddr, ip + 12, 4);
    __builtin_memcpy(&k->daddr, ip + 16, 4);
    k->proto = ip[9];
    u16 frag = (((u16)ip[6] << 8) | ip[7]) & 0x1fff;
    if ((k->proto == 6 || k->proto == 17) && frag == 0 && ihl >= 20 && ihl <= 60) {
        unsigned char *l4 = ip + ihl;
        if ((void *)(l4 + 4) <= data_end) {
            k->sport = ((u16)l4[0] << 8) | l4[1];
            k->dport = ((u16)l4[2] << 8) | l4[3];
        }
    }
    return 0;
}

#endif
