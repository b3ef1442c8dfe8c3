// Command swarmscope-probe-reader is the native light probe's long-lived process: it reads the
// maps the BCC loader pinned and serves the controller's ProbeControl fleet (probe.proto) as
// the Python agent (probes/agent.py) does: Hello/Register with the token's mutual HMAC
// challenge, one Session stream, heartbeats with its own CPU and RSS, OpenWindow / CloseWindow
// with exact counter deltas per node, the exec.window samples, and the window span as OTLP
// bytes in WindowDone (and over OTLP, gRPC or http/protobuf, when OTEL_EXPORTER_OTLP_ENDPOINT is set).
//
//	swarmscope probe --mode native --controller 127.0.0.1:7070 --programs exec_count
//	# the Python CLI checks the settings, runs the loader, then execs:
//	swarmscope-probe-reader --controller ADDR --node n1 --pins exec_count=/sys/fs/bpf/ss-probe-... \
//	    --claim /run/swarmscope/owners/pindir/probe-... [--tls-ca F --tls-cert F --tls-key F]
//
// The token comes from --token-file, else $SWARMSCOPE_TOKEN (never argv). Caveats: it carries
// exec_count, neigh_events, syscall_count, pkt_count and bpf_stats (probes/native.py refuses
// the rest before loading), with start-up settings only; the process is the Python CLI's own after exec, so
// the pin claims (pid + start time) stay valid and the pins are removed at exit, or swept as
// any dead light probe's if it is SIGKILLed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type config struct {
	controller, node, probeID, version, tokenFile string
	upstreams                                     []string // --controller split on commas
	tlsCA, tlsCert, tlsKey, tlsServerName         string
	pins                                          [][2]string // (program, pin dir), in --pins order
	claims                                        []string    // owner claim files, removed at exit
	syscalls                                      syscallSettings
	ifaces                                        map[uint32]string // pkt_count: ifindex -> name
	heartbeat                                     time.Duration
	failback                                      time.Duration // 0 = never go back to upstreams[0]
	retries                                       int
	token                                         string
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func parseArgs(args []string) (*config, error) {
	fs := flag.NewFlagSet("swarmscope-probe-reader", flag.ContinueOnError)
	c := &config{}
	var pins, claims, pktIfaces multiFlag
	var hb float64
	host, _ := os.Hostname()
	fs.StringVar(&c.controller, "controller", "", "controller HOST:PORT, or relays and the controller: A,B,C (tried in turn)")
	fs.StringVar(&c.node, "node", host, "node name")
	fs.StringVar(&c.probeID, "probe-id", fmt.Sprintf("%s-%d", host, os.Getpid()), "probe id")
	fs.StringVar(&c.version, "version", "0", "swarmscope version reported at Register")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the token (else $SWARMSCOPE_TOKEN)")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "CA of the controller's certificate (turns TLS on)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "client certificate (mTLS)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "key of --tls-cert")
	fs.StringVar(&c.tlsServerName, "tls-server-name", "", "name checked in the controller's certificate")
	fs.Var(&pins, "pins", "PROGRAM=PIN_DIR (repeatable)")
	fs.Var(&claims, "claim", "owner claim file removed at exit (repeatable)")
	fs.Var(&pktIfaces, "pkt-iface", "pkt_count: IFINDEX=NAME of an interface it is attached to (repeatable)")
	fs.Float64Var(&hb, "heartbeat", 1.0, "heartbeat seconds if the controller sets none")
	fs.IntVar(&c.retries, "retries", 5, "reconnect attempts before giving up")
	var fb float64
	fs.Float64Var(&fb, "failback", 30, "away from the first upstream, check it every S seconds and go back when it answers; 0 = never")
	fs.StringVar(&c.syscalls.unistd, "syscall-names", "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
		"syscall_count: the header naming syscall numbers")
	var filter string
	fs.StringVar(&filter, "syscall-filter", "", "syscall_count: the start-up filter's numbers (comma list; empty = all)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var problems []string
	for _, p := range pins {
		name, dir, ok := strings.Cut(p, "=")
		if !ok || dir == "" {
			problems = append(problems, fmt.Sprintf("--pins %q: want PROGRAM=DIR", p))
			continue
		}
		c.pins = append(c.pins, [2]string{name, dir})
	}
	c.claims = claims
	c.ifaces = map[uint32]string{}
	for _, p := range pktIfaces {
		i, name, ok := strings.Cut(p, "=")
		idx, err := strconv.ParseUint(i, 10, 32)
		if !ok || err != nil || name == "" {
			problems = append(problems, fmt.Sprintf("--pkt-iface %q: want IFINDEX=NAME", p))
			continue
		}
		c.ifaces[uint32(idx)] = name
	}
	for _, f := range strings.Split(filter, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		nr, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			problems = append(problems, fmt.Sprintf("--syscall-filter %q: not a number", f))
		}
		c.syscalls.filter = append(c.syscalls.filter, nr)
	}
	c.heartbeat = time.Duration(hb * float64(time.Second))
	c.failback = time.Duration(fb * float64(time.Second))
	// "a,b,c": upstreams tried in turn (relays first, the controller last), as the Python agent.
	for _, u := range strings.Split(c.controller, ",") {
		if u = strings.TrimSpace(u); u != "" {
			c.upstreams = append(c.upstreams, u)
		}
	}
	if len(c.upstreams) == 0 {
		problems = append(problems, "--controller is required")
	}
	if len(c.pins) == 0 {
		problems = append(problems, "--pins: at least one program")
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		problems = append(problems, "--tls-cert needs --tls-key (and the other way round)")
	}
	if c.tlsCert != "" && c.tlsCA == "" {
		problems = append(problems, "a client certificate needs --tls-ca (the controller's CA)")
	}
	tok := os.Getenv("SWARMSCOPE_TOKEN")
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			problems = append(problems, fmt.Sprintf("cannot read token file: %v", err))
		}
		tok = string(b)
	}
	c.token = strings.TrimSpace(tok)
	if c.token == "" && c.tokenFile == "" {
		problems = append(problems, "no token: pass --token-file or set SWARMSCOPE_TOKEN")
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return c, nil
}

func main() {
	os.Exit(run())
}

func run() int {
	c, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "swarmscope-probe-reader: error: %v\n", err)
		return 2
	}
	// The pins are this process's (the claim names its pid): removed on every way out but
	// SIGKILL, which the next light probe's or run's sweep covers.
	defer removePins(c)
	progs, err := openPrograms(c.pins, c.syscalls, c.ifaces)
	if err != nil {
		fmt.Fprintf(os.Stderr, "swarmscope-probe-reader: error: %v\n", err)
		return 1
	}
	defer closePrograms(progs)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	a := newAgent(c, progs)
	defer a.otlp.flush() // the last window's span goes out before the pins are removed
	if err := a.runForever(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "swarmscope-probe-reader: error: %v\n", err)
		return 1
	}
	return 0
}

func removePins(c *config) {
	for _, pin := range c.pins {
		if dir := pin[1]; strings.HasPrefix(dir, "/sys/fs/bpf/ss-") {
			_ = os.RemoveAll(dir) // unpins: links detach, maps and programs are freed
		}
	}
	for _, f := range c.claims {
		_ = os.Remove(f)
	}
}
