// Command swarmscope-simprobes: the compiled simulated probes of the fan-in benches, the same
// wire behaviour as bench/simprobes.py (its docstring is the reference), at a fraction of the
// CPU. One process holds a slice of the simulated probes; bench/simprobes_compiled.py
// (GoSimProbes) starts one per slice and speaks to it over stdin/stdout:
//
//	SWARMSCOPE_TOKEN=t swarmscope-simprobes <<< '{"upstreams":["127.0.0.1:7070"],"spread":1,
//	    "first":0,"names":["node-000000"],"per_channel":50}'
//
// stdin: one JSON line (the slice), then nothing; its end (EOF) stops the process. stdout:
// "registered N" (the slice's probes whose first Session is up) each time N changes, checked
// every 0.2 s as the Python host does. stderr: slow-join and failed-join reports. Build:
// tools/build_simprobes.sh (pb generated at build time, cached by source hash).
// Caveat: a controller that fails its HMAC proof fails that probe at once (the Python probe's
// task dies of it silently); every other difference would be a bug.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// joinsInFlight: Hello + Register in flight per process, as simprobes.JOINS_IN_FLIGHT (why:
// there, and docs/scale-out.md, "Joining 100,000").
const joinsInFlight = 100

type slice struct {
	Upstreams  []string `json:"upstreams"`
	Spread     int      `json:"spread"`
	First      int      `json:"first"`
	Names      []string `json:"names"`
	PerChannel int      `json:"per_channel"`
}

type host struct {
	token      string
	registered atomic.Int64
	joining    chan struct{}

	mu     sync.Mutex
	errors map[string]int // handshake errors by gRPC code name
	failed []string       // probes that gave up, not yet reported

	acks sync.Map // (run_id, window_id) -> serialized ack, alike for every probe
}

func (h *host) countError(code string) {
	h.mu.Lock()
	h.errors[code]++
	h.mu.Unlock()
}

func (h *host) fail(what string) {
	h.mu.Lock()
	h.failed = append(h.failed, what)
	h.mu.Unlock()
}

// upstreamsOf: probe i's upstreams in turn (indexes), as simprobes.upstreams_of: the first
// spread (the relays) round robin from its own, then the rest (the controller) as last resort.
func upstreamsOf(i, n, spread int) []int {
	out := make([]int, 0, n)
	for k := 0; k < spread; k++ {
		out = append(out, (i+k)%spread)
	}
	for u := spread; u < n; u++ {
		out = append(out, u)
	}
	return out
}

func dial(addr string) (*grpc.ClientConn, error) {
	// One ClientConn, one TCP connection (grpc-go never shares them between ClientConns); it
	// connects at its first call. Reconnect backoff capped at 5 s as the Python channels' is.
	bo := backoff.DefaultConfig
	bo.MaxDelay = 5 * time.Second
	return grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 20 * time.Second}),
	)
}

func codesSaid(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("'%s': %d", k, m[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// report: what the Python host's loop does every 0.2 s (registered count, slow joins, failures).
func (h *host) report(s *slice, out *bufio.Writer) {
	last := int64(-1)
	said, tSaid := "{}", time.Now()
	for {
		h.mu.Lock()
		errs := codesSaid(h.errors)
		failed := h.failed
		h.failed = nil
		h.mu.Unlock()
		n := h.registered.Load()
		if errs != said && time.Since(tSaid) > 10*time.Second {
			fmt.Fprintf(os.Stderr, "simprobes %d: %d/%d up, handshake errors %s\n", s.First, n, len(s.Names), errs)
			said, tSaid = errs, time.Now()
		}
		if len(failed) > 0 {
			fmt.Fprintf(os.Stderr, "simprobes: %d failed to join, e.g. %s\n", len(failed), failed[0])
		}
		if n != last {
			fmt.Fprintf(out, "registered %d\n", n)
			if out.Flush() != nil {
				os.Exit(0) // nobody reads: the bench is gone
			}
			last = n
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func main() {
	token := strings.TrimSpace(os.Getenv("SWARMSCOPE_TOKEN"))
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadBytes('\n')
	s := &slice{}
	if err == nil {
		err = json.Unmarshal(line, s)
	}
	if err != nil || token == "" || len(s.Upstreams) == 0 || s.PerChannel < 1 || s.Spread < 1 {
		fmt.Fprintf(os.Stderr, "swarmscope-simprobes: want SWARMSCOPE_TOKEN and one JSON line on stdin "+
			"(upstreams, spread >= 1, first, names, per_channel >= 1): %v\n", err)
		os.Exit(2)
	}
	// stdin's end is the stop signal (the Python side closes it, or dies).
	go func() {
		_, _ = io.Copy(io.Discard, in)
		os.Exit(0)
	}()
	h := &host{token: token, joining: make(chan struct{}, joinsInFlight), errors: map[string]int{}}
	ctx := context.Background()
	var groups [][]*grpc.ClientConn
	for g := 0; g < len(s.Names); g += s.PerChannel {
		conns := make([]*grpc.ClientConn, len(s.Upstreams))
		for u, addr := range s.Upstreams {
			if conns[u], err = dial(addr); err != nil {
				fmt.Fprintf(os.Stderr, "swarmscope-simprobes: upstream %q: %v\n", addr, err)
				os.Exit(2)
			}
		}
		groups = append(groups, conns)
	}
	go h.report(s, bufio.NewWriter(os.Stdout))
	for i, name := range s.Names {
		group := groups[i/s.PerChannel]
		var mine []*grpc.ClientConn
		for _, u := range upstreamsOf(s.First+i, len(s.Upstreams), s.Spread) {
			mine = append(mine, group[u])
		}
		go h.probe(ctx, mine, name)
		if i%200 == 199 {
			time.Sleep(50 * time.Millisecond) // a paced join: no Hello storm of thousands at once
		}
	}
	select {}
}
