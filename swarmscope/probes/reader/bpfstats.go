package main

// bpf_stats: every BPF program's run count, run time and recursion misses on the node, as one
// host-level (cgroup 0) snapshot with counters prog.<id>.<name>.{run_cnt,run_time_ns,
// recursion_misses}, as probes/bpfstats.py's BpfStats: statistics are on (BPF_ENABLE_STATS)
// while the reader runs; the name is the BTF function name when the kernel's 15-character
// name is a truncation; a program that went keeps its last values (at most maxGone of them).

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

const maxGone = 4096

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_]`)

type bpfStats struct {
	countersOnly
	stats io.Closer
	last  map[string]uint64
	names map[ebpf.ProgramID]string
	gone  []ebpf.ProgramID
	seen  map[ebpf.ProgramID]bool // ids with entries in last
}

func openBpfStats() (*bpfStats, error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("bpf_stats: enabling run statistics: %w", err)
	}
	return &bpfStats{stats: c, last: map[string]uint64{}, names: map[ebpf.ProgramID]string{},
		seen: map[ebpf.ProgramID]bool{}}, nil
}

func (b *bpfStats) name() string       { return "bpf_stats" }
func (b *bpfStats) counters() []string { return nil } // dynamic
func (b *bpfStats) close()             { b.stats.Close() }

// fullName: the BTF function name when the kernel's name may be truncated (15 characters).
func (b *bpfStats) fullName(id ebpf.ProgramID, info *ebpf.ProgramInfo) string {
	if len(info.Name) < 15 {
		return info.Name
	}
	if n, ok := b.names[id]; ok {
		return n
	}
	name := info.Name
	if fis, err := info.FuncInfos(); err == nil && len(fis) > 0 && fis[0].Func != nil && fis[0].Func.Name != "" {
		name = fis[0].Func.Name
	}
	if len(b.names) >= 65536 {
		b.names = map[ebpf.ProgramID]string{}
	}
	b.names[id] = name
	return name
}

func (b *bpfStats) snapshot() (snapshot, error) {
	now := map[ebpf.ProgramID]bool{}
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("bpf_stats: listing programs: %w", err)
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded since
		}
		info, err := p.Info()
		p.Close()
		if err != nil {
			continue
		}
		base := "prog." + strconv.FormatUint(uint64(id), 10) + "." + safeName(b.fullName(id, info))
		cnt, _ := info.RunCount()
		rt, _ := info.Runtime()
		miss, _ := info.RecursionMisses()
		b.last[base+".run_cnt"], b.last[base+".run_time_ns"], b.last[base+".recursion_misses"] = cnt, uint64(rt), miss
		now[id] = true
	}
	for id := range b.seen {
		if !now[id] && !containsID(b.gone, id) {
			b.gone = append(b.gone, id)
		}
	}
	for id := range now {
		b.seen[id] = true
	}
	for len(b.gone) > maxGone {
		old := b.gone[0]
		b.gone = b.gone[1:]
		prefix := "prog." + strconv.FormatUint(uint64(old), 10) + "."
		for k := range b.last {
			if strings.HasPrefix(k, prefix) {
				delete(b.last, k)
			}
		}
		delete(b.seen, old)
	}
	out := snapshot{0: map[string]uint64{}}
	for k, v := range b.last {
		out[0][k] = v
	}
	return out, nil
}

func containsID(ids []ebpf.ProgramID, id ebpf.ProgramID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func safeName(name string) string {
	if s := unsafeName.ReplaceAllString(name, "_"); s != "" {
		return s
	}
	return "_"
}
