/* agent_list.c — the neighbor agent's list, compiled: shared log -> BPF map in one call.
 *
 *   long n = ss_list(map_fd, log_base, offset, page, kbuf, vbuf, out);   (ctypes)
 *
 * Loads the log's ``tail`` (one aligned 8-byte load at offset 8 of the header, the store the
 * writer makes last) and walks the control plane's committed log (targets/neighbors/shmlog.py:
 * records ``u64 revision, u32 n, u32 nd, keys[4n], values[12n], deleted[4nd]``, 8-byte padded)
 * from ``offset`` to that tail, and programs every put with BPF_MAP_UPDATE_BATCH (libbpf), exactly as
 * ipc_agent.py does in Python: one record is programmed straight from the mapping (no copy) in
 * calls of at most ``page`` entries; several are copied into the caller's ``page``-entry
 * buffers ``kbuf``/``vbuf`` so the calls are ceil(N / page). Returns the entries programmed,
 * -EAGAIN when a record in the range deletes keys (nothing done: the caller applies the range
 * in Python, in order; ``out[0]`` is the tail loaded), or -errno of a failed call. ``out`` gets
 * {tail loaded (the end offset), last revision, update calls}. ``page`` 0 is the prime's
 * warm-up: the tail and the first header are read, nothing is programmed, 0 is returned. All arguments are known before
 * the list starts, so the caller's timed part is this one call. Why C: the same walk in Python costs ~20 µs per list after an idle spell, and
 * Arion lists one neighbor in 15 µs (docs/neighbors.md).
 *
 *   ss_threads(threads, min_entries, page);   (once, before a timed list: buffers allocated)
 *
 * A range of at least ``min_entries`` puts is programmed by ``threads`` threads at once (the
 * kernel's hash update, ~0.7 µs per entry on the 2-core VM, is the whole cost of a big list,
 * and its bucket locks let two CPUs update one map together). The entries are split by key
 * (a hash of it), not by position: every thread walks all records in order and programs only
 * its keys, so a key written twice still ends with its last value. Calls per thread:
 * ceil(its entries / page). ``out[2]`` is the calls of all threads.
 */
#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include <bpf/bpf.h>

#define KEY 4
#define VAL 12
#define HDR 16

struct rec {
    uint64_t rev;
    uint32_t n;
    uint32_t nd;
};

static uint64_t pad8(uint64_t x) { return (x + 7) & ~(uint64_t)7; }

static long update(int fd, const void *k, const void *v, uint32_t n, uint64_t *calls)
{
    uint32_t count = n;
    if (!n)
        return 0;
    *calls += 1;
    if (bpf_map_update_batch(fd, k, v, &count, NULL) < 0)
        return errno ? -errno : -EIO;
    return count;
}

#define MAX_THREADS 8

static struct {
    uint32_t threads, min_entries, page; /* page: the entries every thread's buffers hold */
    uint32_t cap[MAX_THREADS];          /* entries thread t's buffers hold */
    uint8_t *kbuf[MAX_THREADS], *vbuf[MAX_THREADS];
} par = {1, 0, 0, {0}, {0}, {0}};

/* Threads for big lists and their page buffers (allocated and touched here, before any timed
 * call, so a list never pays page faults for them). threads <= 1: every list is sequential.
 * Returns 0, or -ENOMEM. */
long ss_threads(uint32_t threads, uint32_t min_entries, uint32_t page)
{
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    par.threads = 1; /* sequential unless every thread's buffers are ready */
    if (threads > 1) {
        for (uint32_t t = 0; t < threads; t++) {
            if (par.cap[t] >= page)
                continue;
            free(par.kbuf[t]);
            free(par.vbuf[t]);
            par.cap[t] = 0;
            par.kbuf[t] = malloc((size_t)page * KEY);
            par.vbuf[t] = malloc((size_t)page * VAL);
            if (!par.kbuf[t] || !par.vbuf[t])
                return -ENOMEM;
            memset(par.kbuf[t], 1, (size_t)page * KEY); /* touched: faulted in now */
            memset(par.vbuf[t], 1, (size_t)page * VAL);
            par.cap[t] = page;
        }
        par.page = page;
        for (uint32_t t = 0; t < threads; t++)
            par.page = par.cap[t] < par.page ? par.cap[t] : par.page;
    }
    par.threads = threads ? threads : 1;
    par.min_entries = min_entries;
    return 0;
}

/* The thread a key belongs to: a multiplicative hash, so sequential keys split evenly. */
static uint32_t part(const uint8_t *k, uint32_t threads)
{
    uint32_t key;
    memcpy(&key, k, KEY);
    return (uint32_t)(((uint64_t)(key * 2654435761u) * threads) >> 32);
}

struct job {
    int fd;
    uint32_t t, threads, page;
    const uint8_t *base;
    uint64_t off, tail, calls;
    long done;
};

static void *run_part(void *arg)
{
    struct job *j = arg;
    uint8_t *kb = par.kbuf[j->t], *vb = par.vbuf[j->t];
    uint32_t fill = 0;
    long r;
    for (uint64_t at = j->off; at < j->tail;) {
        const struct rec *h = (const void *)(j->base + at);
        const uint8_t *k = j->base + at + HDR, *v = k + (uint64_t)h->n * KEY;
        for (uint32_t i = 0; i < h->n; i++) {
            if (part(k + (uint64_t)i * KEY, j->threads) != j->t)
                continue;
            memcpy(kb + (uint64_t)fill * KEY, k + (uint64_t)i * KEY, KEY);
            memcpy(vb + (uint64_t)fill * VAL, v + (uint64_t)i * VAL, VAL);
            if (++fill == j->page) {
                if ((r = update(j->fd, kb, vb, fill, &j->calls)) < 0) {
                    j->done = r;
                    return NULL;
                }
                j->done += r;
                fill = 0;
            }
        }
        at += pad8(HDR + (uint64_t)h->n * (KEY + VAL));
    }
    if ((r = update(j->fd, kb, vb, fill, &j->calls)) < 0)
        j->done = r;
    else
        j->done += r;
    return NULL;
}

/* One record's puts, straight from the mapping (zero copy), in update calls of at most
 * ``page`` entries; the entries programmed, or -errno. */
static long update_record(int fd, const uint8_t *base, uint64_t at, uint32_t page, uint64_t *calls)
{
    const struct rec *h = (const void *)(base + at);
    const uint8_t *k = base + at + HDR, *v = k + (uint64_t)h->n * KEY;
    long done = 0, r;
    for (uint32_t a = 0; a < h->n; a += page) {
        uint32_t m = h->n - a < page ? h->n - a : page;
        if ((r = update(fd, k + (uint64_t)a * KEY, v + (uint64_t)a * VAL, m, calls)) < 0)
            return r;
        done += r;
    }
    return done;
}

/* The range [off, tail) (puts only) by par.threads threads; the caller's thread is one. */
static long list_parallel(int fd, const uint8_t *base, uint64_t off, uint64_t tail, uint32_t page,
                          uint64_t *calls)
{
    struct job jobs[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    uint32_t n = par.threads, started = 1;
    long done = 0;
    for (uint32_t t = 0; t < n; t++)
        jobs[t] = (struct job){fd, t, n, page, base, off, tail, 0, 0};
    for (uint32_t t = 1; t < n; t++, started++)
        if (pthread_create(&th[t], NULL, run_part, &jobs[t]))
            break;
    if (started < n) { /* no thread: nothing started may be left half done, so run them here */
        for (uint32_t t = started; t < n; t++)
            run_part(&jobs[t]);
    }
    run_part(&jobs[0]);
    for (uint32_t t = 1; t < started; t++)
        pthread_join(th[t], NULL);
    for (uint32_t t = 0; t < n; t++) {
        *calls += jobs[t].calls;
        if (jobs[t].done < 0)
            return jobs[t].done;
        done += jobs[t].done;
    }
    return done;
}

long ss_list(int fd, const uint8_t *base, uint64_t off, uint32_t page, uint8_t *kbuf, uint8_t *vbuf,
             uint64_t *out)
{
    uint64_t at, records = 0, entries = 0, rev = 0, calls = 0;
    uint64_t tail = __atomic_load_n((const uint64_t *)(base + 8), __ATOMIC_ACQUIRE);
    long done = 0, r;
    out[0] = tail;
    out[1] = 0;
    out[2] = 0;
    if (!page) /* the agent's prime: this call's path warmed, the first header read, no update */
    {
        if (off < tail)
            (void)*(volatile const uint32_t *)(base + off + 8);
        return 0;
    }
    for (at = off; at < tail; records++) { /* a first pass over the headers: deletes? */
        const struct rec *h = (const void *)(base + at);
        if (h->nd)
            return -EAGAIN;
        entries += h->n;
        rev = h->rev;
        at += pad8(HDR + (uint64_t)h->n * (KEY + VAL));
    }
    if (par.threads > 1 && entries >= par.min_entries && page <= par.page) {
        if ((done = list_parallel(fd, base, off, tail, page, &calls)) < 0)
            return done;
    } else if (records == 1) { /* zero copy, straight from the mapping */
        const struct rec *h = (const void *)(base + off);
        if ((done = update_record(fd, base, off, page, &calls)) < 0)
            return done;
        rev = h->rev;
    } else { /* full pages: ceil(N / page) calls whatever the record sizes */
        uint32_t fill = 0;
        for (at = off; at < tail;) {
            const struct rec *h = (const void *)(base + at);
            const uint8_t *k = base + at + HDR, *v = k + (uint64_t)h->n * KEY;
            for (uint32_t d = 0; d < h->n;) {
                uint32_t m = page - fill < h->n - d ? page - fill : h->n - d;
                memcpy(kbuf + (uint64_t)fill * KEY, k + (uint64_t)d * KEY, (uint64_t)m * KEY);
                memcpy(vbuf + (uint64_t)fill * VAL, v + (uint64_t)d * VAL, (uint64_t)m * VAL);
                fill += m;
                d += m;
                if (fill == page) {
                    if ((r = update(fd, kbuf, vbuf, fill, &calls)) < 0)
                        return r;
                    done += r;
                    fill = 0;
                }
            }
            rev = h->rev;
            at += pad8(HDR + (uint64_t)h->n * (KEY + VAL));
        }
        if ((r = update(fd, kbuf, vbuf, fill, &calls)) < 0)
            return r;
        done += r;
    }
    out[0] = tail;
    out[1] = rev;
    out[2] = calls;
    return done;
}

/* The watch, compiled (session 7): the agent's watch thread blocks here, in recv() on its watch
 * connection, without the GIL and without Python between the note's arrival and the update.
 *
 *   long n = ss_watch(sock, map_fd, log_base, offset, page, nbuf, nbuf_size, out);   (ctypes)
 *
 * Waits for at least one whole note (``u32 16, u8 'w', u64 revision, u64 tail``; ipc.py) and
 * takes every whole note received (the latest tail wins: notes of commits that came together
 * are one walk), stamps CLOCK_MONOTONIC, then programs each record from ``offset`` to that tail
 * as the Python watch does: straight from the mapping, in calls of at most ``page`` entries,
 * one record after the other (so the calls per transaction are the same). A record that
 * deletes keys stops the walk before it: the caller applies the rest in Python, in order.
 * Bytes of a partial note stay in ``nbuf`` (``out[5]`` holds their count, in and out).
 * ``out`` gets {offset reached, last revision programmed, update calls, wake-up ns, note tail,
 * bytes kept}. Returns the entries programmed, -EPIPE when the connection ended (the agent's
 * cancel shuts it down), -EPROTO for a frame that is not a note, or -errno. */
#define NOTE_FRAME 21

long ss_watch(int sock, int fd, const uint8_t *base, uint64_t off, uint32_t page, uint8_t *nbuf,
              uint32_t nbuf_size, uint64_t *out)
{
    uint64_t have = out[5], tail = 0, used = 0, rev = 0, calls = 0;
    long done = 0, r;
    struct timespec ts;
    if (have > nbuf_size || nbuf_size < NOTE_FRAME || !page)
        return -EINVAL;
    for (;;) {
        while (have - used >= NOTE_FRAME) {
            uint32_t len;
            uint64_t t;
            memcpy(&len, nbuf + used, 4);
            if (len != 16 || nbuf[used + 4] != 'w')
                return -EPROTO;
            memcpy(&t, nbuf + used + 13, 8);
            tail = t > tail ? t : tail;
            used += NOTE_FRAME;
        }
        if (tail)
            break;
        if (used) { /* never: used > 0 implies tail > 0 (a log's tail is past its header) */
            memmove(nbuf, nbuf + used, have - used);
            have -= used;
            used = 0;
        }
        ssize_t got = recv(sock, nbuf + have, nbuf_size - have, 0);
        if (got == 0)
            return -EPIPE;
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        have += (uint64_t)got;
    }
    clock_gettime(CLOCK_MONOTONIC, &ts);
    memmove(nbuf, nbuf + used, have - used);
    out[5] = have - used;
    out[3] = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    out[4] = tail;
    uint64_t at = off;
    while (at < tail) {
        const struct rec *h = (const void *)(base + at);
        if (h->nd)
            break; /* deletes: the caller's turn, from here */
        if ((r = update_record(fd, base, at, page, &calls)) < 0)
            return r;
        done += r;
        rev = h->rev;
        at += pad8(HDR + (uint64_t)h->n * (KEY + VAL));
    }
    out[0] = at;
    out[1] = rev;
    out[2] = calls;
    return done;
}
