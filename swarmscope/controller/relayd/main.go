// Command swarmscope-relayd: the relay of controller/relay.py in Go (`swarmscope relay --engine
// native` execs it with the flags relay_cli.py declares).
//
//	SWARMSCOPE_TOKEN=... swarmscope-relayd --upstream ctl:7070 --bind 0.0.0.0:7071 --relay-id r1
//
// Towards the probes it is a fleet (fleet.go, server.go: the same Hello/Register challenge,
// heartbeat pacing, liveness and per-probe windows as controller/fleet.py); towards the upstream
// it registers as a relay (upstream.go: Roster changes, one WindowAck per outcome and one
// WindowDone per window). The token comes only from $SWARMSCOPE_TOKEN (never argv: /proc shows
// it). Caveat: it takes probes only; a relay registering below it is refused (the Python relay
// would take it).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// maxMessage: one WindowDone carries every reading of the relay's probes (fleet.py's
// MAX_MESSAGE_BYTES).
const maxMessage = 512 << 20

type config struct {
	upstreams                     []string
	bind, relayID, token          string
	tlsCert, tlsKey, tlsClientCA  string
	upCA, upCert, upKey, upName   string
	heartbeat, liveness           time.Duration
	budget, heartbeatS, livenessS float64
	windowTimeout, rosterEvery    time.Duration
	retries                       int
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func parse() (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("swarmscope-relayd", flag.ContinueOnError)
	up := fs.String("upstream", "", "comma-separated upstreams (controller or relays), in turn")
	fs.StringVar(&c.bind, "bind", "0.0.0.0:7071", "address the probes dial")
	fs.StringVar(&c.relayID, "relay-id", "", "this relay's id upstream (default relay-<hostname>-<pid>)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "TLS towards the probes: certificate (PEM)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "TLS towards the probes: key (PEM)")
	fs.StringVar(&c.tlsClientCA, "tls-client-ca", "", "mTLS: the CA that signs probes' certificates")
	fs.StringVar(&c.upCA, "upstream-tls-ca", "", "TLS upstream: CA of the upstream's certificate")
	fs.StringVar(&c.upCert, "upstream-tls-cert", "", "mTLS upstream: client certificate")
	fs.StringVar(&c.upKey, "upstream-tls-key", "", "mTLS upstream: key of --upstream-tls-cert")
	fs.StringVar(&c.upName, "upstream-tls-server-name", "", "TLS upstream: the name to check")
	hb := fs.Float64("heartbeat", 1.0, "heartbeat seconds handed to probes")
	lv := fs.Float64("liveness", 5.0, "seconds of silence before a probe is gone")
	fs.Float64Var(&c.budget, "heartbeat-budget", 500, "heartbeats/s from all probes here")
	wt := fs.Float64("window-timeout", 20.0, "seconds a close waits for probes")
	rs := fs.Float64("roster", 0.1, "seconds between Roster messages (changes only)")
	fs.IntVar(&c.retries, "retries", 10, "failed rounds of upstreams before giving up")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return nil, err
	}
	for _, u := range strings.Split(*up, ",") {
		if u = strings.TrimSpace(u); u != "" {
			c.upstreams = append(c.upstreams, u)
		}
	}
	if len(c.upstreams) == 0 {
		return nil, fmt.Errorf("--upstream: required (the controller, or another relay)")
	}
	c.token = strings.TrimSpace(os.Getenv("SWARMSCOPE_TOKEN"))
	if c.token == "" {
		return nil, fmt.Errorf("no token: set $SWARMSCOPE_TOKEN")
	}
	if c.relayID == "" {
		host, _ := os.Hostname()
		c.relayID = fmt.Sprintf("relay-%s-%d", host, os.Getpid())
	}
	c.heartbeatS, c.livenessS = *hb, *lv // pace computes in seconds, as fleet_state.pace
	c.heartbeat, c.liveness = seconds(*hb), seconds(*lv)
	c.windowTimeout, c.rosterEvery = seconds(*wt), seconds(*rs)
	return c, nil
}

func readCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read TLS CA %s: %w", path, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("TLS CA %s holds no PEM certificate", path)
	}
	return pool, nil
}

// serverCreds: as swarmscope/tls.py's server_credentials (with a client CA, only the clients it
// signed get in).
func (c *config) serverCreds() ([]grpc.ServerOption, error) {
	if c.tlsCert == "" {
		return nil, nil
	}
	pair, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("cannot read TLS certificate %s / key %s: %w", c.tlsCert, c.tlsKey, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if c.tlsClientCA != "" {
		if cfg.ClientCAs, err = readCA(c.tlsClientCA); err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}, nil
}

// dialCreds: as a probe's (swarmscope/tls.py channel_credentials and channel_options).
func (c *config) dialCreds() (grpc.DialOption, error) {
	if c.upCA == "" && c.upCert == "" {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	cfg := &tls.Config{ServerName: c.upName, MinVersion: tls.VersionTLS12}
	var err error
	if c.upCA != "" {
		if cfg.RootCAs, err = readCA(c.upCA); err != nil {
			return nil, err
		}
	}
	if c.upCert != "" {
		pair, err := tls.LoadX509KeyPair(c.upCert, c.upKey)
		if err != nil {
			return nil, fmt.Errorf("cannot read TLS client certificate %s / key %s: %w", c.upCert, c.upKey, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg)), nil
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "swarmscope: %v\n", err) // as the CLI prints a SwarmscopeError
	os.Exit(1)
}

func main() {
	c, err := parse()
	if err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		fatal(err)
	}
	opts, err := c.serverCreds()
	if err != nil {
		fatal(err)
	}
	dial, err := c.dialCreds()
	if err != nil {
		fatal(err)
	}
	lis, err := net.Listen("tcp", c.bind)
	if err != nil {
		fatal(fmt.Errorf("cannot listen on %s: %w", c.bind, err))
	}
	f := newFleet(c)
	// Static flow-control windows: they turn off grpc-go's BDP estimation, which answers each
	// burst of data on a connection with a PING (two syscalls more per probe message here: the
	// windows then cost 1.5x the CPU). 4 MiB a stream lets a probe's WindowDone with samples
	// come in one window on a LAN.
	srv := grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(maxMessage), grpc.MaxSendMsgSize(maxMessage),
		grpc.MaxConcurrentStreams(100000), grpc.InitialWindowSize(4<<20), grpc.InitialConnWindowSize(8<<20))...)
	srv.RegisterService(&serviceDesc, f)
	go func() { _ = srv.Serve(lis) }()
	fmt.Printf("swarmscope relay %s listening on port %d\n", c.relayID, lis.Addr().(*net.TCPAddr).Port)
	os.Stdout.Sync()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	r := &relay{c: c, f: f, dial: dial}
	err = r.runForever(ctx)
	// Sessions end, probes stay up (they dial their next upstream, and come back by failback):
	// only the upstream's Shutdown is passed on. 1 s of grace, as fleet.py's stop.
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		srv.Stop()
	}
	if err != nil {
		fatal(err)
	}
}
